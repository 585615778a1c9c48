"""The controller's view in the simulator: Ray's metric path and an AutoscalingContext look-alike.

Rules (mirroring Ray 2.60; times in simulated seconds):
  record   every running replica samples its `record_autoscaling_stats` dict and its ongoing
           requests every record_interval_s = min(0.2 * look_back_period_s, metrics_interval_s);
           the handle samples its queued requests at the same ticks.
  push     every metrics_interval_s the samples taken so far become visible to the controller
           (pushed_until = the push time), as replicas push their window to the controller.
  window   a policy call at t sees samples with t - look_back_period_s <= ts <= pushed_until;
           aggregated_metrics[key][replica] = their mean (Ray: time-weighted mean, equal spacing
           here); raw_metrics[key][replica] = the visible points (timestamp, value).
  requests total_num_requests = sum over running replicas of mean ongoing + mean handle queue;
           total_queued_requests = mean handle queue.
Complexity: O(replicas * samples * keys) per aggregation, computed lazily on first access.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Point:
    """Ray's TimeStampedValue: (timestamp, value)."""

    timestamp: float
    value: float


class MetricHistory:
    """Samples of one replica (or of the handle), pruned to what any window can still see."""

    def __init__(self, keep_s: float):
        self._keep_s = keep_s
        self.samples: deque[tuple[float, float, dict[str, float] | None]] = deque()

    def add(self, t: float, ongoing: float, stats: dict[str, float] | None) -> None:
        self.samples.append((t, ongoing, stats))
        while self.samples and self.samples[0][0] < t - self._keep_s:
            self.samples.popleft()

    def visible(self, now: float, look_back_s: float, pushed_until: float) -> list[tuple[float, float, dict | None]]:
        lo = now - look_back_s
        return [s for s in self.samples if lo <= s[0] <= pushed_until]


def mean_ongoing(samples: list[tuple[float, float, dict | None]]) -> float:
    return sum(s[1] for s in samples) / len(samples) if samples else 0.0


class SimAutoscalingContext:
    """The AutoscalingContext attributes the policies read, over the simulator's metric history."""

    def __init__(
        self,
        *,
        deployment_name: str,
        current_num_replicas: int,
        target_num_replicas: int,
        running_replicas: list[str],
        visible: dict[str, list[tuple[float, float, dict | None]]],
        handle_visible: list[tuple[float, float, dict | None]],
        min_replicas: int,
        max_replicas: int,
        policy_state: dict[str, Any],
        last_scale_up_time: float | None,
        last_scale_down_time: float | None,
        current_time: float,
    ):
        self.deployment_name = deployment_name
        self.app_name = "sim"
        self.current_num_replicas = current_num_replicas
        self.target_num_replicas = target_num_replicas
        self.running_replicas = running_replicas
        self.capacity_adjusted_min_replicas = min_replicas
        self.capacity_adjusted_max_replicas = max_replicas
        self.policy_state = policy_state
        self.last_scale_up_time = last_scale_up_time
        self.last_scale_down_time = last_scale_down_time
        self.current_time = current_time
        self.config = None
        self._visible = visible
        self.total_queued_requests = mean_ongoing(handle_visible)
        self.total_num_requests = (
            sum(mean_ongoing(visible.get(r, [])) for r in running_replicas) + self.total_queued_requests
        )
        self._aggregated: dict[str, dict[str, float]] | None = None
        self._raw: dict[str, dict[str, list[Point]]] | None = None

    @property
    def aggregated_metrics(self) -> dict[str, dict[str, float]]:
        if self._aggregated is None:
            out: dict[str, dict[str, float]] = {}
            for replica in self.running_replicas:
                stats = [s[2] for s in self._visible.get(replica, []) if s[2] is not None]
                if not stats:
                    continue
                for key in stats[0]:
                    out.setdefault(key, {})[replica] = sum(s[key] for s in stats) / len(stats)
            self._aggregated = out
        return self._aggregated

    @property
    def raw_metrics(self) -> dict[str, dict[str, list[Point]]]:
        if self._raw is None:
            out: dict[str, dict[str, list[Point]]] = {}
            for replica in self.running_replicas:
                points = [Point(s[0], s[2]["arrivals_per_s"]) for s in self._visible.get(replica, []) if s[2]]
                if points:
                    out.setdefault("arrivals_per_s", {})[replica] = points
            self._raw = out
        return self._raw
