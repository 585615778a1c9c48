"""The autoscaling frontier: each policy's cost per completed request at SLO attainment targets.

Rules (SLO and attainment as in ray_dspine/autoscale/slo.py):
  grids     every policy gets GRID_SIZE = 8 configurations over its own parameters:
              ours          tuning.candidates(base, 8, tuning seed): the profile's calibrated
                            defaults, then 7 distinct points drawn from tuning.SEARCH_SPACE;
              ray-default   (rebuilt from Ray Serve's replica_queue_length_autoscaling_policy)
                            target_ongoing_requests in RAY_TARGETS x (upscale, downscale delay) in
                            RAY_DELAYS (Ray's defaults 30 s / 600 s, and 0 s / 120 s);
              ray-llm-ttft  (rebuilt from Ray Serve LLM's TTFTAutoscalingPolicy) ttft_target_s in
                            TTFT_TARGETS_S (0.25-2 s) x idle_threshold in IDLE_THRESHOLDS, Ray's
                            default delays.
  days      the tuning day (seed tuning_seed) and a held-out day (seed held_out_seed, a different
            draw of the same traffic window): every configuration runs on the tuning day; only the
            chosen ones run on the held-out day, which no choice has seen.
  choice    for a target a: among a policy's configurations whose tuning-day attainment >= a, the
            cheapest per completed request (ties: fewer replica-hours, then grid order). None
            qualifies -> the policy has no configuration for a (reported as such, not filled in).
  report    the chosen configuration's held-out cost per completed request and attainment; it keeps
            the target when its held-out attainment >= a.
  goal      ours against ray-default at the same target: reduction = 1 - cost_ours / cost_ray on
            the held-out day. With one held-out day there is no paired interval, so the verdict is
            "undecided" (met / missed need a paired 95% interval clear of 25%).
  days      across_held_out_days: receipts of one tuning day with different held-out seeds choose
            the same configurations; per target the per-day reductions are paired (same arrivals for
            both policies), and their mean's two-sided 95% Student-t interval decides: met when it
            lies at or above 25%, missed when wholly below, else undecided
            (`python -m dspine_lab.autoscale.frontier RECEIPT.json ...`).
Complexity: 3 * GRID_SIZE tuning-day runs + at most 3 * len(targets) held-out runs per pool;
O(days * targets) to combine receipts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel

from dspine_lab.autoscale.baselines import RayDefaultSettings, TtftRuleSettings
from dspine_lab.autoscale.tuning import apply_point, candidates
from dspine_lab.sim.config import OursPolicy, PoolSimConfig, RayDefaultPolicySpec, TtftRulePolicySpec
from dspine_lab.sim.results import DayResult
from ray_dspine.autoscale.config import CostAutoscalingConfig

GRID_SIZE = 8
TARGETS = (0.95, 0.97, 0.98, 0.99, 0.995)
RAY_TARGETS = (1.0, 2.0, 4.0, 16.0)
RAY_DELAYS = ((30.0, 600.0), (0.0, 120.0))
TTFT_TARGETS_S = (0.25, 0.75, 1.25, 2.0)
IDLE_THRESHOLDS = (1.0, 8.0)
GOAL_COST_REDUCTION = 0.25
POLICIES = ("ray-default", "ray-llm-ttft", "ours")
LABELS = {
    "ray-default": "ray-default (rebuilt from Ray Serve replica_queue_length_autoscaling_policy)",
    "ray-llm-ttft": "ray-llm-ttft (rebuilt from Ray Serve LLM TTFTAutoscalingPolicy)",
    "ours": "ours",
}


@dataclass(frozen=True)
class GridPoint:
    policy: str
    index: int
    params: dict[str, float]
    spec: BaseModel


def ray_default_grid(pool: PoolSimConfig) -> list[GridPoint]:
    points = []
    for target in RAY_TARGETS:
        for up, down in RAY_DELAYS:
            params = {"target_ongoing_requests": target, "upscale_delay_s": up, "downscale_delay_s": down}
            settings = RayDefaultSettings(max_ongoing_requests=pool.max_ongoing_requests, **params)
            points.append(GridPoint("ray-default", len(points), params, RayDefaultPolicySpec(settings=settings)))
    return points


def ttft_rule_grid() -> list[GridPoint]:
    points = []
    for target in TTFT_TARGETS_S:
        for idle in IDLE_THRESHOLDS:
            params = {"ttft_target_s": target, "idle_threshold": idle}
            spec = TtftRulePolicySpec(settings=TtftRuleSettings(**params))
            points.append(GridPoint("ray-llm-ttft", len(points), params, spec))
    return points


def ours_grid(base: CostAutoscalingConfig, tuning_seed: int) -> list[GridPoint]:
    return [
        GridPoint("ours", i, point, OursPolicy(params=apply_point(base, point)))
        for i, point in enumerate(candidates(base, GRID_SIZE, tuning_seed))
    ]


def grids(pool: PoolSimConfig, base: CostAutoscalingConfig, tuning_seed: int) -> dict[str, list[GridPoint]]:
    return {"ray-default": ray_default_grid(pool), "ray-llm-ttft": ttft_rule_grid(), "ours": ours_grid(base, tuning_seed)}


def choose(rows: list[dict], target: float) -> dict | None:
    """Apply the choice rule to tuning-day rows {index, slo_attainment, cost_per_completed_request_usd,
    replica_hours}; returns the chosen row or None."""
    ok = [r for r in rows if r["slo_attainment"] >= target]
    if not ok:
        return None
    return min(ok, key=lambda r: (r["cost_per_completed_request_usd"], r["replica_hours"], r["index"]))


def _figures(result: DayResult) -> dict:
    return {
        "slo_attainment": result.slo_attainment,
        "cost_per_completed_request_usd": result.cost_per_completed_request_usd,
        "replica_hours": result.replica_hours,
        "peak_replicas": result.peak_replicas,
        "mean_replicas": result.mean_replicas,
        "num_requests": result.num_requests,
        "num_failed": result.num_failed,
    }


def frontier(
    grid: dict[str, list[GridPoint]],
    run_tuning: Callable[[GridPoint], DayResult],
    run_held_out: Callable[[GridPoint], DayResult],
    targets: tuple[float, ...] = TARGETS,
) -> dict:
    """Apply the days, choice, report and goal rules; returns the receipt's figures."""
    tuning: dict[str, list[dict]] = {}
    for policy, points in grid.items():
        tuning[policy] = [{"index": p.index, "params": p.params, **_figures(run_tuning(p))} for p in points]
    held: dict[tuple[str, int], dict] = {}
    by_target = []
    for target in targets:
        entry: dict = {"target": target, "policies": {}}
        for policy, points in grid.items():
            chosen = choose(tuning[policy], target)
            if chosen is None:
                entry["policies"][policy] = None
                continue
            key = (policy, chosen["index"])
            if key not in held:
                held[key] = _figures(run_held_out(points[chosen["index"]]))
            out = held[key]
            entry["policies"][policy] = {
                "index": chosen["index"],
                "params": chosen["params"],
                "tuning": {k: chosen[k] for k in ("slo_attainment", "cost_per_completed_request_usd")},
                "held_out": out,
                "keeps_target_held_out": out["slo_attainment"] >= target,
            }
        entry["goal"] = goal_verdict(entry["policies"].get("ours"), entry["policies"].get("ray-default"))
        by_target.append(entry)
    return {"tuning_day": tuning, "frontier": by_target}


def goal_verdict(ours: dict | None, ray: dict | None) -> dict:
    """Held-out cost reduction of ours against ray-default; 'undecided' without a paired interval."""
    if ours is None or ray is None:
        missing = " and ".join(n for n, r in (("ours", ours), ("ray-default", ray)) if r is None)
        return {"verdict": "undecided", "why": f"{missing}: no configuration met the target on the tuning day"}
    reduction = 1.0 - ours["held_out"]["cost_per_completed_request_usd"] / ray["held_out"]["cost_per_completed_request_usd"]
    return {
        "cost_reduction_held_out": reduction,
        "interval": None,
        "verdict": "undecided",
        "why": "one held-out day: no paired interval",
    }


def table_lines(pool: str, result: dict) -> list[str]:
    """The printed table; every line says SIMULATED."""
    lines = [
        f"SIMULATED frontier {pool}: target | policy | chosen config (tuning day) | tuning attainment | "
        "held-out cost/request mUSD | held-out attainment | peak replicas"
    ]
    for entry in result["frontier"]:
        for policy in POLICIES:
            row = entry["policies"].get(policy)
            head = f"SIMULATED {pool} {100 * entry['target']:.1f}% {LABELS[policy]}:"
            if row is None:
                lines.append(f"{head} no configuration met the target on the tuning day")
                continue
            h = row["held_out"]
            params = ", ".join(f"{k}={v:g}" for k, v in row["params"].items())
            lines.append(
                f"{head} [{row['index']}] {params} | {100 * row['tuning']['slo_attainment']:.2f}% | "
                f"{1000 * h['cost_per_completed_request_usd']:.4f} | {100 * h['slo_attainment']:.2f}% | "
                f"{h['peak_replicas']}"
            )
        g = entry["goal"]
        reduction = g.get("cost_reduction_held_out")
        shown = "n/a" if reduction is None else f"{100 * reduction:.1f}%"
        lines.append(
            f"SIMULATED {pool} {100 * entry['target']:.1f}% ours vs ray-default: cost reduction {shown} "
            f"(goal 25%): {g['verdict']} ({g['why']})"
        )
    return lines


# Student t 0.975 quantiles for 1-10 degrees of freedom (two-sided 95%).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def paired_interval(reductions: list[float]) -> tuple[float, float, float] | None:
    """Mean and two-sided 95% Student-t interval of per-day paired cost reductions (2-11 days)."""
    n = len(reductions)
    if not 2 <= n <= len(T_975) + 1:
        return None
    mean = sum(reductions) / n
    sd = (sum((r - mean) ** 2 for r in reductions) / (n - 1)) ** 0.5
    half = T_975[n - 2] * sd / n**0.5
    return mean, mean - half, mean + half


def interval_verdict(interval: tuple[float, float, float] | None, goal: float = GOAL_COST_REDUCTION) -> str:
    """met when the interval lies wholly at or above the goal, missed when wholly below, else undecided."""
    if interval is None:
        return "undecided"
    _, lo, hi = interval
    return "met" if lo >= goal else "missed" if hi < goal else "undecided"


def across_held_out_days(receipts: list[dict]) -> list[dict]:
    """Receipts of one pool and tuning day, each with another held-out seed: per target, the paired
    reductions of ours against ray-default (the same chosen pair on every day), their interval and verdict."""
    out = []
    for i, target in enumerate(receipts[0]["targets"]):
        entries = [r["frontier"][i] for r in receipts]
        ours = [e["policies"]["ours"] for e in entries]
        ray = [e["policies"]["ray-default"] for e in entries]
        if any(x is None for x in ours + ray):
            out.append({"target": target, "verdict": "undecided", "why": "no configuration met it on the tuning day"})
            continue
        if len({(o["index"], r["index"]) for o, r in zip(ours, ray)}) != 1:
            raise ValueError(f"target {target}: the receipts chose different configurations (not one tuning day)")
        reductions = [
            1.0 - o["held_out"]["cost_per_completed_request_usd"] / r["held_out"]["cost_per_completed_request_usd"]
            for o, r in zip(ours, ray)
        ]
        interval = paired_interval(reductions)
        out.append({
            "target": target, "held_out_seeds": [r["held_out_seed"] for r in receipts], "reductions": reductions,
            "interval": interval, "verdict": interval_verdict(interval),
            "ours_attainment": [o["held_out"]["slo_attainment"] for o in ours],
            "ray_default_attainment": [r["held_out"]["slo_attainment"] for r in ray],
        })  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m dspine_lab.autoscale.frontier RECEIPT.json ...`: the paired interval across held-out days."""
    import json
    import sys
    from pathlib import Path

    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    receipts = [json.loads(p.read_text(encoding="utf-8")) for p in paths]
    pool = receipts[0]["pool"]["name"]
    for row in across_held_out_days(receipts):
        if "reductions" not in row:
            print(f"SIMULATED {pool} {100 * row['target']:g}%: {row['verdict']} ({row['why']})")
            continue
        mean, lo, hi = row["interval"] if row["interval"] else (float("nan"),) * 3
        print(
            f"SIMULATED {pool} {100 * row['target']:g}% ours vs ray-default over held-out seeds {row['held_out_seeds']}: "
            f"cost reduction {100 * mean:.1f}% [95% CI {100 * lo:.1f}%, {100 * hi:.1f}%] (goal 25%): {row['verdict']}; "
            f"ours attainment {min(row['ours_attainment']):.4f}-{max(row['ours_attainment']):.4f}, ray-default "
            f"{min(row['ray_default_attainment']):.4f}-{max(row['ray_default_attainment']):.4f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
