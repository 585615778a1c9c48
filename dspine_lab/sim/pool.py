"""Replicas of a simulated pool: start-up, load balancing, draining scale-down, and billing.

Rules (times in simulated seconds):
  start     a replica asked for at t is billed from t and serves from t + startup_s.
  balance   a request goes to the serving replica with the fewest ongoing requests among those
            below max_ongoing_requests (ties: the oldest replica); with none, it waits in the
            handle's FIFO queue and is sent when a replica frees a slot or becomes ready.
  remove    to drop k replicas: replicas still starting go first (newest first; billed until now),
            then serving ones with the fewest ongoing requests (ties: the newest). A removed serving
            replica drains: it gets no new requests, finishes its in-flight ones, and is checked every
            graceful_shutdown_wait_loop_s; it stops at the first check with none left, or at
            graceful_shutdown_timeout_s, when what is left is cut off (counted as failed).
  billing   replica-hours = sum over replicas of (stop - requested) / 3600; a replica still up at the
            end is billed until the end of the simulation.
Complexity: O(replicas) per placement and per scaling action.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from ray_dspine.autoscale.config import StatsWindowConfig
from ray_dspine.autoscale.stats import ReplicaWindowStats
from ray_dspine.engines.simulated.core import SimReplicaCore
from ray_dspine.engines.simulated.profile import SimProfile
from dspine_lab.sim.config import PoolSimConfig
from dspine_lab.sim.context import MetricHistory

STARTING, SERVING, DRAINING, STOPPED = "starting", "serving", "draining", "stopped"


@dataclass
class SimReplica:
    index: int
    name: str
    requested_s: float
    ready_s: float
    stats: ReplicaWindowStats
    history: MetricHistory
    state: str = STARTING
    core: SimReplicaCore | None = None
    ongoing: int = 0
    scheduled_s: float | None = None
    drain_start_s: float | None = None
    stopped_s: float | None = None
    inflight: set[int] = field(default_factory=set)


class SimPool:
    def __init__(self, config: PoolSimConfig, profile: SimProfile, clock, seed: int, keep_history_s: float):
        self.config = config
        self._profile = profile
        self._clock = clock
        self._seed = seed
        self._keep_s = keep_history_s
        self._stats_config = StatsWindowConfig(window_s=config.stats_window_s, slo=config.slo)
        self.replicas: list[SimReplica] = []
        self.handle_queue: deque[int] = deque()

    # ---- lifecycle ------------------------------------------------------------------------------
    def start_replica(self, now: float) -> SimReplica:
        index = len(self.replicas)
        replica = SimReplica(
            index=index,
            name=f"{self.config.name}-{index}",
            requested_s=now,
            ready_s=now + self.config.startup_s,
            stats=ReplicaWindowStats(self._stats_config, self._clock),
            history=MetricHistory(self._keep_s),
        )
        self.replicas.append(replica)
        return replica

    def make_ready(self, replica: SimReplica) -> None:
        replica.state = SERVING
        replica.stats = ReplicaWindowStats(self._stats_config, self._clock, started_s=self._clock())
        rng = random.Random(f"{self._seed}:{replica.index}")
        replica.core = SimReplicaCore(self.config.engine, self._profile, rng, token_events=False)

    def live(self) -> list[SimReplica]:
        """Starting or serving replicas: what Ray counts against the target."""
        return [r for r in self.replicas if r.state in (STARTING, SERVING)]

    def serving(self) -> list[SimReplica]:
        return [r for r in self.replicas if r.state == SERVING]

    def choose_to_remove(self, count: int) -> list[SimReplica]:
        """Apply the remove rule's order: starting (newest first), then serving (least ongoing, newest)."""
        starting = sorted((r for r in self.replicas if r.state == STARTING), key=lambda r: -r.index)
        serving = sorted(self.serving(), key=lambda r: (r.ongoing, -r.index))
        return (starting + serving)[:count]

    def stop(self, replica: SimReplica, now: float) -> None:
        replica.state = STOPPED
        replica.stopped_s = now
        replica.scheduled_s = None

    # ---- placement ------------------------------------------------------------------------------
    def pick(self) -> SimReplica | None:
        """Apply the balance rule; None when every serving replica is full."""
        best = None
        limit = self.config.max_ongoing_requests
        for replica in self.replicas:
            if replica.state == SERVING and replica.ongoing < limit and (best is None or replica.ongoing < best.ongoing):
                best = replica
        return best

    # ---- billing --------------------------------------------------------------------------------
    def replica_hours(self, end_s: float) -> float:
        return sum(((r.stopped_s if r.stopped_s is not None else end_s) - r.requested_s) for r in self.replicas) / 3600.0
