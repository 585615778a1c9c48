"""Human-readable text for capacity plans: the CLI table and the refusal message.

`format_plan` prints one labelled row per quantity, with the arithmetic that produced it; the JSON
form of a plan is `plan.model_dump()`. `RefusalNote` accumulates the same arithmetic while the planner
runs, so a refusal shows every step up to the one that failed. GiB = 2**30 bytes, MiB = 2**20.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray_dspine.capacity.config import CapacityConfig
    from ray_dspine.capacity.planner import CapacityPlan

GIB = 1 << 30
MIB = 1 << 20


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GIB:.1f} GiB"


def _size(num_bytes: int) -> str:
    return f"{num_bytes / MIB:.1f} MiB" if num_bytes >= MIB else f"{num_bytes:,} B"


class RefusalNote:
    """The arithmetic of one planning attempt, phrased for a CapacityError message."""

    def __init__(
        self,
        pool_name: str,
        cfg: CapacityConfig,
        gpu_gb: float,
        static: int,
        w_target: int,
        w_draft: int,
        weights_per_gpu: int,
        rest: int,
    ) -> None:
        self._parts = [
            f"{pool_name} does not fit on {cfg.gpu} x{cfg.tensor_parallel_size}: "
            f"{gpu_gb:.1f} GiB x {cfg.mem_fraction_static:g} = {_gib(static)} static per GPU",
            f"weights {w_target / GIB:.1f} + draft {w_draft / GIB:.1f} = {_gib(w_target + w_draft)} per replica, "
            f"{_gib(weights_per_gpu)} per GPU",
            f"rest {_gib(rest)} per GPU",
        ]
        self._cfg = cfg

    def add_mamba(self, budget: int, per_req: int, ratio: int, snapshots: int, slots: int, running: int) -> None:
        r = self._cfg.mamba_full_memory_ratio
        self._parts.append(
            f"Mamba {_gib(budget)} = rest x {r:g}/{1 + r:g} -> {slots:,} slots of {_size(per_req)} "
            f"x (1 + {snapshots}/{ratio}) -> {running:,} running"
        )

    def add_kv(self, kv_budget: int, kv_tok: int, draft_tok: int, ring: int, free_tokens: int) -> None:
        if ring:
            text = f"KV {_gib(kv_budget)} - draft ring {_gib(ring)} over {kv_tok:,} B/token = {free_tokens:,} tokens"
        else:
            text = f"KV {_gib(kv_budget)} / ({kv_tok:,} + draft {draft_tok:,} B/token) = {free_tokens:,} tokens"
        self._parts.append(text)

    def _message(self, failure: str, advice: str) -> str:
        return "; ".join(self._parts) + f" {failure}; {advice}"

    def weights_do_not_fit(self) -> str:
        return self._message(
            "<= 0 left after weights",
            "raise mem_fraction_static or tensor_parallel_size, or use weight_dtype fp8",
        )

    def no_mamba_slots(self) -> str:
        return self._message(
            "leaves no Mamba slot for a request",
            "raise mem_fraction_static or tensor_parallel_size, or lower speculative_num_draft_tokens "
            "(or use mamba_strategy replay_ssm)",
        )

    def kv_too_small(self) -> str:
        return self._message(
            f"< context {self._cfg.context_length_tokens:,} tokens",
            "lower context_length_tokens or speculative_num_draft_tokens, or raise tensor_parallel_size",
        )


def format_plan(pool_name: str, plan: CapacityPlan, extra_rows: Sequence[tuple[str, str]] = ()) -> str:
    """A multi-line table of one pool's plan, for the CLI; `extra_rows` (label, value) go last."""
    t = plan.tensor_parallel_size
    draft = plan.draft_name or "none (autoregressive)"
    per_req = plan.mamba_state_bytes_per_request
    rows = [
        ("gpu", f"{plan.gpu} x{t}, {plan.gpu_memory_gb:.1f} GiB each"),
        ("model", f"{plan.profile_name}" + (" (ASSUMED shape, see profile)" if plan.profile_assumption else "")),
        ("drafter", draft),
        ("static budget", f"{plan.gpu_memory_gb:.1f} GiB x {plan.mem_fraction_static:g} = "
                          f"{plan.static_gb_per_gpu:.1f} GiB per GPU"),
        ("weights", f"target {plan.target_weight_gb:.1f} + draft {plan.draft_weight_gb:.1f} GiB per replica "
                    f"= {plan.weights_gb_per_gpu:.1f} GiB per GPU"),
        ("post-weight budget", f"{plan.rest_gb_per_gpu:.1f} GiB per GPU -> Mamba {plan.mamba_budget_gb_per_gpu:.1f}"
                               f" GiB, KV {plan.kv_budget_gb_per_gpu:.1f} GiB"),
        ("KV bytes/token", f"target {plan.target_kv_bytes_per_token:,} + draft {plan.draft_kv_bytes_per_token:,}"
                           f" B per GPU"),
        ("Mamba state/request", f"{per_req / MIB:.1f} MiB per GPU (conv {plan.mamba_conv_bytes_per_request / MIB:.1f}"
                                f" + SSM {plan.mamba_ssm_bytes_per_request / MIB:.1f} MiB)"),
        ("Mamba pool", f"{plan.max_mamba_cache_size:,} slots, ratio {plan.mamba_ratio}, "
                       f"{plan.num_snapshots_per_request} snapshots/request ({plan.mamba_strategy})"),
        ("per-draft snapshots", f"{plan.snapshot_gb_per_gpu:.1f} GiB per GPU"),
        ("free KV tokens", f"{plan.free_kv_tokens:,} = {plan.num_full_context_requests} x context "
                           f"{plan.kv_tokens_per_request_max:,}"),
        ("max running requests", f"{plan.max_running_requests:,}"
                                 + (f" (cap {plan.max_running_requests_cap:,})"
                                    if plan.max_running_requests_cap is not None else "")),
        ("state slots", f"{plan.num_state_slots:,} total, {plan.state_slots_per_request} per request"),
        ("draft VRAM", f"{plan.draft_vram_gb:.2f} GiB per replica (weights + KV at full pool)"),
        ("sglang args", " ".join(plan.sglang_args)),
        *extra_rows,
    ]  # fmt: skip
    width = max(len(label) for label, _ in rows)
    lines = [f"pool {pool_name}"] + [f"  {label.ljust(width)}  {value}" for label, value in rows]
    return "\n".join(lines)
