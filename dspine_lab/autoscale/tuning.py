"""Search the policy's parameters on simulated days: the cheapest per completed request within SLO.

Rules:
  space      headroom, scale_down_utilization, downscale_delay_s, upscale_delay_s, lookahead_s,
             guard_miss_ratio and the capacity model's calibration (itl_tail_factor,
             ttft_wait_factor) take values from SEARCH_SPACE.
  candidates the config's own values first, then num_candidates - 1 distinct points drawn uniformly
             from the grid with random.Random(seed) (a point already drawn is drawn again).
  objective  feasible when slo_attainment >= min_attainment; feasible candidates rank by
             cost_per_completed_request_usd (then replica-hours); infeasible ones after all feasible,
             by attainment (higher first). The first ranked is the tuned point.
  validate   with validation days (the same traffic under other seeds), the feasible candidates
             are simulated on them in rank order (all of them, or the first max_validations); the
             first that keeps min_attainment on its worst validation day moves to the front (the
             others keep their order). When none does, the ranking stands. A point tuned to the
             edge of the SLO on one day is caught before it misses on the next.
Complexity: num_candidates + up to (feasible candidates * validation days) simulated days.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from ray_dspine.autoscale.config import CostAutoscalingConfig
from dspine_lab.sim.results import DayResult

SEARCH_SPACE: dict[str, tuple[float, ...]] = {
    "headroom": (0.0, 0.1, 0.2, 0.3),
    "scale_down_utilization": (0.7, 0.85, 1.0),
    "downscale_delay_s": (120.0, 300.0, 600.0),
    "upscale_delay_s": (0.0, 30.0),
    "lookahead_s": (0.0, 120.0),
    "itl_tail_factor": (1.2, 1.4, 1.8),
    "ttft_wait_factor": (0.5, 1.0, 1.5),
    "guard_miss_ratio": (0.03, 0.05, 0.08),
}
# Keys of SEARCH_SPACE that live in the capacity model rather than on the policy config.
CAPACITY_KEYS = ("itl_tail_factor", "ttft_wait_factor")


@dataclass(frozen=True)
class Trial:
    params: dict[str, float]
    result: DayResult


def point_of(config: CostAutoscalingConfig) -> dict[str, float]:
    return {
        k: float(getattr(config.capacity, k) if k in CAPACITY_KEYS else getattr(config, k)) for k in SEARCH_SPACE
    }


def apply_point(config: CostAutoscalingConfig, point: dict[str, float]) -> CostAutoscalingConfig:
    top = {k: v for k, v in point.items() if k not in CAPACITY_KEYS}
    capacity = config.capacity.model_copy(update={k: v for k, v in point.items() if k in CAPACITY_KEYS})
    return config.model_copy(update={**top, "capacity": capacity})


def candidates(base: CostAutoscalingConfig, num_candidates: int, seed: int) -> list[dict[str, float]]:
    """Apply the candidates rule."""
    rng = random.Random(seed)
    points = [point_of(base)]
    size = 1
    for values in SEARCH_SPACE.values():
        size *= len(values)
    while len(points) < min(num_candidates, size):
        point = {k: float(rng.choice(v)) for k, v in SEARCH_SPACE.items()}
        if point not in points:
            points.append(point)
    return points


def rank(trials: list[Trial], min_attainment: float) -> list[Trial]:
    """Apply the objective rule."""

    def key(trial: Trial):
        r = trial.result
        feasible = r.slo_attainment >= min_attainment
        if feasible:
            return (0, r.cost_per_completed_request_usd, r.replica_hours)
        return (1, -r.slo_attainment, r.cost_per_completed_request_usd)

    return sorted(trials, key=key)


def tune(
    base: CostAutoscalingConfig,
    evaluate: Callable[[CostAutoscalingConfig], DayResult],
    *,
    num_candidates: int,
    seed: int,
    min_attainment: float,
    progress: Callable[[int, Trial], None] | None = None,
) -> list[Trial]:
    """Evaluate every candidate on the simulator; returns the trials ranked best first."""
    trials = []
    for index, point in enumerate(candidates(base, num_candidates, seed)):
        trial = Trial(params=point, result=evaluate(apply_point(base, point)))
        trials.append(trial)
        if progress is not None:
            progress(index, trial)
    return rank(trials, min_attainment)


def validate(
    ranked: list[Trial],
    evaluate: Callable[[dict[str, float]], DayResult],
    *,
    min_attainment: float,
    max_validations: int | None = None,
) -> tuple[list[Trial], list[Trial]]:
    """Apply the validate rule; returns (the new ranking, the validation-day trials in the order run)."""
    checked: list[Trial] = []
    feasible = [t for t in ranked if t.result.slo_attainment >= min_attainment]
    for trial in feasible if max_validations is None else feasible[:max_validations]:
        check = Trial(params=trial.params, result=evaluate(trial.params))
        checked.append(check)
        if check.result.slo_attainment >= min_attainment:
            return [trial] + [t for t in ranked if t is not trial], checked
    return ranked, checked
