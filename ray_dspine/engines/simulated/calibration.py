"""Closed-loop throughput of one simulated replica in virtual time (the vendor's benchmark shape).

Rule: `concurrency` clients each keep one request in flight; when one finishes its client submits the
next, until `num_requests` are done. Every prompt shares a prefix that a warm-up request has cached
(the vendor replay used prefix caching), plus one unique block. Reported:
  steady_output_tok_s = tokens produced while all clients still had work / that span
  end_to_end_output_tok_s = all tokens / (last finish - first submit)
  accept_length = sum(completion tokens) / sum(verify steps) over the measured requests.
Parameters: concurrency >= 1; num_requests >= concurrency; token counts >= 1.
Complexity: O(steps * concurrency) Python work; AR at 48 x 2048 tokens is ~12k steps (~0.3 s).
Run `python -m ray_dspine.engines.simulated.calibration` to print the table (simulated figures).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ray_dspine.engines.simulated.config import SimDrafter, SimulatedEngineConfig
from ray_dspine.engines.simulated.core import SimReplicaCore
from ray_dspine.engines.simulated.profile import SimProfile, load_profile
from ray_dspine.engines.simulated.request import SimRequest


@dataclass(frozen=True)
class ThroughputResult:
    drafter: SimDrafter
    steady_output_tok_s: float
    end_to_end_output_tok_s: float
    accept_length: float
    mean_step_ms: float
    num_requests: int


def closed_loop_throughput(
    profile: SimProfile,
    drafter: SimDrafter,
    *,
    concurrency: int = 8,
    num_requests: int = 48,
    shared_prefix_blocks: int = 29,
    max_tokens: int = 2048,
    seed: int = 0,
) -> ThroughputResult:
    block = 512
    config = SimulatedEngineConfig(
        profile=profile.name, drafter=drafter, total_kv_tokens=1_000_000, num_state_slots=concurrency + 1,
        max_running_requests=concurrency + 1, prefix_block_tokens=block, seed=seed,
    )  # fmt: skip
    core = SimReplicaCore(config, profile, random.Random(seed))
    shared = tuple(f"shared-{i}" for i in range(shared_prefix_blocks))
    prompt_tokens = (shared_prefix_blocks + 1) * block

    def make(i: int) -> SimRequest:
        return SimRequest(f"r{i}", prompt_tokens, max_tokens, shared + (f"unique-{i}",))

    core.submit(SimRequest("warm-up", prompt_tokens, 1, shared + ("unique-warm-up",)), 0.0)
    t = 0.0
    while (next_s := core.next_event_s()) is not None:
        t = next_s
        core.advance_to(t)
    start_s = t
    steps_before = core.counters()
    num_submitted = num_done = tokens_in_window = 0
    total_tokens = total_steps = 0
    window_end_s: float | None = None
    for _ in range(concurrency):
        core.submit(make(num_submitted), t)
        num_submitted += 1
    while num_done < num_requests:
        t = core.next_event_s()  # type: ignore[assignment]
        for event in core.advance_to(t):
            if event.kind in ("first_token", "tokens") and window_end_s is None:
                tokens_in_window += event.num_tokens
            if event.kind == "finished" and event.usage is not None:
                num_done += 1
                total_tokens += event.usage.completion_tokens
                total_steps += event.usage.verify_steps
                if num_submitted < num_requests:
                    core.submit(make(num_submitted), t)
                    num_submitted += 1
                elif window_end_s is None:
                    window_end_s = t
    counters = core.counters()
    num_steps = (
        counters.num_decode_steps + counters.num_verify_steps + counters.num_prefill_steps
        - steps_before.num_decode_steps - steps_before.num_verify_steps - steps_before.num_prefill_steps
    )  # fmt: skip
    assert window_end_s is not None
    return ThroughputResult(
        drafter=drafter,
        steady_output_tok_s=tokens_in_window / (window_end_s - start_s),
        end_to_end_output_tok_s=total_tokens / (t - start_s),
        accept_length=total_tokens / total_steps,
        mean_step_ms=1000.0 * (counters.busy_s - steps_before.busy_s) / num_steps,
        num_requests=num_requests,
    )


def main() -> None:
    for name in ("h200-qwen3.8-27b", "h100-qwen3.8-27b"):
        profile = load_profile(name)
        print(f"SIMULATED closed-loop throughput, profile {name}, concurrency {profile.calibration.concurrency}")
        for drafter in ("none", "dflash2", "dspine"):
            r = closed_loop_throughput(profile, drafter, concurrency=profile.calibration.concurrency)
            print(
                f"  {drafter:8s} steady {r.steady_output_tok_s:6.1f} tok/s  end-to-end "
                f"{r.end_to_end_output_tok_s:6.1f} tok/s  accept {r.accept_length:4.2f}  step {r.mean_step_ms:5.2f} ms"
            )


if __name__ == "__main__":
    main()
