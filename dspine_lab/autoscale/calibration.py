"""The capacity model of a simulated replica: its profile's step-time coefficients, unchanged.

Rule: base_ms, per_running_ms, per_kv_token_ms = profile.decode; prefill_per_token_ms =
profile.prefill.per_token_ms; with a drafter, draft_ms, draft_tokens = drafter profile and
verify_per_token_ms = profile.verify_per_token_ms (without one: 0, 1, 0);
max_running_requests, total_kv_tokens = the engine config. On GPUs, fill the same fields from
measured step times instead (the simulated profile is calibrated from vendor figures).
Complexity: O(1).
"""

from __future__ import annotations

from ray_dspine.autoscale.config import ReplicaCapacityModel
from ray_dspine.engines.simulated.config import SimulatedEngineConfig
from ray_dspine.engines.simulated.profile import SimProfile


def capacity_from_profile(
    profile: SimProfile, engine: SimulatedEngineConfig, itl_tail_factor: float = 1.4
) -> ReplicaCapacityModel:
    drafter = profile.drafter_profile(engine.drafter)
    return ReplicaCapacityModel(
        base_ms=profile.decode.base_ms,
        per_running_ms=profile.decode.per_running_ms,
        per_kv_token_ms=profile.decode.per_kv_token_ms,
        prefill_per_token_ms=profile.prefill.per_token_ms,
        draft_ms=0.0 if drafter is None else drafter.draft_ms,
        verify_per_token_ms=0.0 if drafter is None else profile.verify_per_token_ms,
        draft_tokens=1 if drafter is None else drafter.draft_tokens,
        max_running_requests=engine.max_running_requests,
        total_kv_tokens=engine.total_kv_tokens,
        itl_tail_factor=itl_tail_factor,
    )
