"""What Ray 2.60's controller does around every policy call, re-stated for virtual time.

Rules (ray/serve/autoscaling_policy.py `_apply_autoscaling_config` and
`AutoscalingState.get_decision_num_replicas`; R = running replicas, T = current target):
  cold start  R = 0 and total_num_requests > 0 -> max(ceil(upscaling_factor), T), policy not called.
  factors     d = policy's desired; with R > 0: n = ceil(R + f * (d - R)), f = upscaling_factor when
              d > R else downscaling_factor; if ceil(d) < R and n = R then n = R - 1. With R = 0: ceil(d).
  delays      n > T: the first wish stamps t0; once now - t0 >= upscale_delay_s -> T' = n.
              n < T: same with downscale_delay_s (n >= 1 unless T = 1). n = T, or a direction
              change, clears t0. Otherwise T' = T. With R = 0 and n > 0 the delay is skipped.
  bounds      T' = min(max_replicas, max(min_replicas, T')).
  state       the policy's returned state plus the two delay keys, handed back next call.
Complexity: O(1) around the policy's own cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dspine_lab.sim.config import RayControls

COUNTER_KEY = "__decision_counter"
STAMP_KEY = "__decision_timestamp"
_EPS_S = 1e-6


def _scaled(desired: float, running: int, controls: RayControls) -> int:
    if running == 0:
        return math.ceil(desired)
    delta = desired - running
    factor = controls.upscaling_factor if delta > 0 else controls.downscaling_factor
    scaled = math.ceil(running + factor * delta)
    if math.ceil(float(desired)) < running and scaled == running:
        scaled -= 1
    return scaled


def _delayed(n: int, target: int, controls: RayControls, state: dict[str, Any], now: float) -> int:
    counter, stamp = state.get(COUNTER_KEY, 0), state.get(STAMP_KEY)
    decision = target
    if n > target:
        if counter < 0:
            counter, stamp = 0, None
        counter += 1
        stamp = now if stamp is None else stamp
        if now - stamp + _EPS_S >= controls.upscale_delay_s:
            counter, stamp, decision = 0, None, n
    elif n < target:
        if counter > 0:
            counter, stamp = 0, None
        counter -= 1
        if target != 1:
            n = max(1, n)
        stamp = now if stamp is None else stamp
        if now - stamp + _EPS_S >= controls.downscale_delay_s:
            counter, stamp, decision = 0, None, n
    else:
        counter, stamp = 0, None
    state[COUNTER_KEY], state[STAMP_KEY] = counter, stamp
    return decision


def apply_ray_controls(
    policy: Callable[[Any], tuple[float, dict[str, Any]]], ctx: Any, controls: RayControls
) -> tuple[int, dict[str, Any]]:
    """One autoscaling decision as Ray's controller makes it; returns (bounded target, state)."""
    lo, hi = ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas
    running, target = ctx.current_num_replicas, ctx.target_num_replicas
    if running == 0 and ctx.total_num_requests > 0:
        n = max(math.ceil(controls.upscaling_factor), target)
        return min(hi, max(lo, n)), dict(ctx.policy_state)
    internal = {COUNTER_KEY: ctx.policy_state.get(COUNTER_KEY, 0), STAMP_KEY: ctx.policy_state.get(STAMP_KEY)}
    desired, user_state = policy(ctx)
    user_state = dict(user_state or {})
    n = _scaled(desired, running, controls)
    if running == 0 and n > 0:
        decision = n
    else:
        decision = _delayed(max(0, n), target, controls, internal, ctx.current_time)
        user_state.update(internal)
    return min(hi, max(lo, decision)), user_state
