"""Discrete-event simulation of one pool for one day: SimReplicaCores in virtual time under a policy.

Rules (times in simulated seconds; pool.py, context.py and controller.py hold the sub-rules):
  events    one heap orders replica step ends, replica start-ups, drain checks and the periodic
            ticks (stats record, metrics push, policy call); arrivals come from the sorted day
            array and go first on ties. A replica's step end is scheduled from
            SimReplicaCore.next_event_s() after every interaction; entries it no longer matches
            are skipped.
  requests  at arrival a request is placed (pool.py balance rule) and submitted to the core; on its
            "finished" event the replica's statistics record (ttft from dispatch, decode time, usage)
            and the freed slot takes the head of the handle queue.
  control   every control_period_s the policy runs inside Ray's controller rules (controller.py) on
            a context built from what Ray would see (context.py); the target then starts or
            removes replicas (pool.py). A fixed policy never scales; a schedule sets the target from
            its bins (SchedulePolicySpec.count_at), clamped to [min_replicas, max_replicas].
  end       arrivals stop at start_s + duration_s; ticks stop too; in-flight requests finish.
  seed      arrivals from DayTraffic.seed; replica r's acceptance from "seed:r"; nothing reads
            a wall clock, so the same config gives the same DayResult.
Complexity: O(events * log(heap)) with O(batch) per step inside the core; memory O(requests).
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from dspine_lab.autoscale.baselines import RayDefaultPolicy, TtftRulePolicy
from ray_dspine.autoscale.ray_policy import CostAutoscalingPolicy
from ray_dspine.engines.protocol import EngineError
from ray_dspine.engines.simulated.profile import SimProfile
from ray_dspine.engines.simulated.request import SimRequest
from dspine_lab.sim.arrivals import DayArrivals
from dspine_lab.sim.config import RayControls, SimConfig
from dspine_lab.sim.context import SimAutoscalingContext
from dspine_lab.sim.controller import apply_ray_controls
from dspine_lab.sim.pool import DRAINING, SERVING, STARTING, SimPool, SimReplica
from dspine_lab.sim.results import DayResult, summarize, within_slo
from dspine_lab.sim.traces import TraceTable

STEP, READY, DRAIN, RECORD, PUSH, CONTROL, TIMELINE = range(7)


def effective_controls(config: SimConfig) -> RayControls:
    """Baselines run with the Ray delays and look-back their settings state."""
    spec = config.policy
    if spec.kind in ("ray-default", "ttft-rule"):
        s = spec.settings
        return config.controls.model_copy(
            update={
                "upscale_delay_s": s.upscale_delay_s,
                "downscale_delay_s": s.downscale_delay_s,
                "look_back_period_s": s.look_back_period_s,
            }
        )
    return config.controls


class DaySimulation:
    def __init__(self, config: SimConfig, trace: TraceTable, profile: SimProfile, day: DayArrivals):
        self.config = config
        self.trace = trace
        self.day = day
        self.controls = effective_controls(config)
        self.now = config.traffic.start_s
        self.end_s = config.traffic.start_s + config.traffic.duration_s
        keep = max(self.controls.look_back_period_s, 120.0) + self.controls.metrics_interval_s
        self.pool = SimPool(config.pool, profile, lambda: self.now, config.traffic.seed, keep)
        n = day.num_requests
        self.dispatch_s = np.full(n, np.nan)
        self.first_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)
        self.output_tokens = trace.output_tokens[day.row].astype(np.int64)
        self.handle_history: deque = deque()
        self.first_tokens: deque[tuple[float, float]] = deque()
        self.pushed_until = -math.inf
        self.target = config.pool.initial_replicas
        self.policy_state: dict = {}
        self.last_up: float | None = None
        self.last_down: float | None = None
        self.scale_events: list[tuple[float, int, int]] = []
        self.timeline: list[int] = []
        self._heap: list = []
        self._seq = 0
        self.policy = self._make_policy()
        self.wants_stats = config.policy.kind == "ours"

    # ---- setup ---------------------------------------------------------------------------------
    def _make_policy(self):
        spec = self.config.policy
        if spec.kind == "ours":
            return CostAutoscalingPolicy(**spec.params.model_dump())
        if spec.kind == "ray-default":
            return RayDefaultPolicy(spec.settings)
        if spec.kind == "ttft-rule":
            return TtftRulePolicy(spec.settings, self._p99_ttft)
        return None

    def _push(self, t: float, kind: int, arg: int = -1) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, arg))

    # ---- requests ------------------------------------------------------------------------------
    def _submit(self, replica: SimReplica, i: int) -> None:
        row = int(self.day.row[i])
        blocks = () if self.trace.prefix_blocks is None else self.trace.prefix_blocks[row]
        request = SimRequest(str(i), int(self.trace.prompt_tokens[row]), int(self.output_tokens[i]), blocks)
        try:
            replica.core.submit(request, self.now)
        except EngineError:
            return  # refused: never fits a replica; stays unfinished (failed)
        replica.ongoing += 1
        replica.inflight.add(i)
        self.dispatch_s[i] = self.now
        replica.stats.record_arrival()
        self._reschedule(replica)

    def _place(self, i: int) -> None:
        replica = self.pool.pick()
        if replica is None:
            self.pool.handle_queue.append(i)
        else:
            self._submit(replica, i)

    def _fill(self, replica: SimReplica) -> None:
        queue = self.pool.handle_queue
        while queue and replica.state == SERVING and replica.ongoing < self.config.pool.max_ongoing_requests:
            self._submit(replica, queue.popleft())

    def _reschedule(self, replica: SimReplica) -> None:
        nxt = replica.core.next_event_s()
        if nxt is not None and nxt != replica.scheduled_s:
            replica.scheduled_s = nxt
            self._push(nxt, STEP, replica.index)

    def _step(self, replica: SimReplica) -> None:
        replica.scheduled_s = None
        for event in replica.core.advance_to(self.now):
            i = int(event.request_id)
            if event.kind == "first_token":
                self.first_s[i] = event.time_s
                self.first_tokens.append((event.time_s, event.time_s - self.dispatch_s[i]))
            elif event.kind == "finished":
                self.finish_s[i] = event.time_s
                replica.ongoing -= 1
                replica.inflight.discard(i)
                if event.usage is not None:
                    first = self.first_s[i]
                    replica.stats.record_finished(first - self.dispatch_s[i], event.time_s - first, event.usage)
        if replica.state == SERVING:
            self._fill(replica)
        self._reschedule(replica)

    # ---- scaling -------------------------------------------------------------------------------
    def _p99_ttft(self, ctx) -> float | None:
        window = self.config.policy.settings.rate_window_s if self.config.policy.kind == "ttft-rule" else 60.0
        lag = self.controls.metrics_interval_s
        while self.first_tokens and self.first_tokens[0][0] < self.now - window - lag:
            self.first_tokens.popleft()
        values = sorted(v for t, v in self.first_tokens if t <= self.now - lag)
        if not values:
            return None
        return values[min(len(values) - 1, math.ceil(0.99 * len(values)) - 1)]

    def _control(self) -> None:
        spec = self.config.policy
        if spec.kind == "fixed":
            self._apply_target(spec.num_replicas)
            return
        if spec.kind == "schedule":
            wanted = spec.count_at(self.now - self.config.traffic.start_s)
            self._apply_target(min(self.config.pool.max_replicas, max(self.config.pool.min_replicas, wanted)))
            return
        serving = self.pool.serving()
        look = self.controls.look_back_period_s
        visible = {r.name: r.history.visible(self.now, look, self.pushed_until) for r in serving}
        handle = [s for s in self.handle_history if self.now - look <= s[0] <= self.pushed_until]
        ctx = SimAutoscalingContext(
            deployment_name=self.config.pool.name,
            current_num_replicas=len(serving),
            target_num_replicas=self.target,
            running_replicas=[r.name for r in serving],
            visible=visible,
            handle_visible=handle,
            min_replicas=self.config.pool.min_replicas,
            max_replicas=self.config.pool.max_replicas,
            policy_state=dict(self.policy_state),
            last_scale_up_time=self.last_up,
            last_scale_down_time=self.last_down,
            current_time=self.now,
        )
        decision, self.policy_state = apply_ray_controls(self.policy, ctx, self.controls)
        self._apply_target(decision)

    def _apply_target(self, target: int) -> None:
        live = self.pool.live()
        if target != self.target:
            self.scale_events.append((self.now, self.target, target))
            if target > self.target:
                self.last_up = self.now
            else:
                self.last_down = self.now
        self.target = target
        for _ in range(target - len(live)):
            replica = self.pool.start_replica(self.now)
            self._push(replica.ready_s, READY, replica.index)
        for replica in self.pool.choose_to_remove(max(0, len(live) - target)):
            if replica.state == STARTING:
                self.pool.stop(replica, self.now)
            else:
                replica.state = DRAINING
                replica.drain_start_s = self.now
                self._push(self.now + self.config.pool.graceful_shutdown_wait_loop_s, DRAIN, replica.index)

    def _drain_check(self, replica: SimReplica) -> None:
        if replica.state != DRAINING:
            return
        if replica.ongoing == 0 or self.now - replica.drain_start_s >= self.config.pool.graceful_shutdown_timeout_s:
            for i in list(replica.inflight):
                replica.core.cancel(str(i))  # cut off: stays unfinished (failed)
            replica.inflight.clear()
            replica.ongoing = 0
            self.pool.stop(replica, self.now)
        else:
            self._push(self.now + self.config.pool.graceful_shutdown_wait_loop_s, DRAIN, replica.index)

    def _record(self) -> None:
        for replica in self.pool.serving():
            stats = replica.stats.snapshot(replica.core.load()) if self.wants_stats else None
            replica.history.add(self.now, float(replica.ongoing), stats)
        self.handle_history.append((self.now, float(len(self.pool.handle_queue)), None))
        while self.handle_history and self.handle_history[0][0] < self.now - 300.0:
            self.handle_history.popleft()

    # ---- loop ----------------------------------------------------------------------------------
    def run(self) -> DayResult:
        start, c = self.now, self.controls
        for _ in range(self.config.pool.initial_replicas):
            replica = self.pool.start_replica(start - self.config.pool.startup_s)  # warm at the start
            self.pool.make_ready(replica)
        for kind, period in ((RECORD, c.record_interval_s), (PUSH, c.metrics_interval_s), (CONTROL, c.control_period_s)):
            self._push(start + period, kind)
        self._push(start, RECORD)
        self._push(start, TIMELINE)
        arrivals, n, i = self.day.arrival_s, self.day.num_requests, 0
        heap, replicas = self._heap, self.pool.replicas
        while True:
            t_arrival = arrivals[i] if i < n else math.inf
            if heap and heap[0][0] < t_arrival:
                t, _, kind, arg = heapq.heappop(heap)
                self.now = t
                if kind == STEP:
                    replica = replicas[arg]
                    if replica.scheduled_s == t and replica.core is not None:
                        self._step(replica)
                elif kind == READY:
                    replica = replicas[arg]
                    if replica.state == STARTING:
                        self.pool.make_ready(replica)
                        self._fill(replica)
                elif kind == DRAIN:
                    self._drain_check(replicas[arg])
                elif t < self.end_s:
                    if kind == RECORD:
                        self._record()
                        self._push(t + c.record_interval_s, RECORD)
                    elif kind == PUSH:
                        self.pushed_until = t
                        self._push(t + c.metrics_interval_s, PUSH)
                    elif kind == TIMELINE:
                        self.timeline.append(len(self.pool.live()))
                        self._push(t + 900.0, TIMELINE)
                    else:
                        self._control()
                        self._push(t + c.control_period_s, CONTROL)
            elif i < n:
                self.now = float(t_arrival)
                self._place(i)
                i += 1
            else:
                break
        return self._result()

    def _result(self) -> DayResult:
        end = max(self.now, self.end_s)
        return summarize(
            policy=self.config.policy.kind,
            pool=self.config.pool.name,
            trace=self.trace.name,
            trace_sha256=self.trace.sha256,
            seed=self.config.traffic.seed,
            duration_s=self.config.traffic.duration_s,
            slo=self.config.pool.slo,
            arrival_s=self.day.arrival_s,
            first_s=self.first_s,
            finish_s=self.finish_s,
            output_tokens=self.output_tokens,
            replica_hours=self.pool.replica_hours(end) - self._warm_hours(),
            gpus_per_replica=self.config.pool.gpus_per_replica,
            gpu_hour_usd=self.config.pool.gpu_hour_usd,
            scale_events=self.scale_events,
            replica_timeline=self.timeline,
        )

    def within_slo(self) -> np.ndarray:
        """Per request of the day (after run): completed within the SLOs (results.within_slo)."""
        return within_slo(self.config.pool.slo, self.day.arrival_s, self.first_s, self.finish_s, self.output_tokens)

    def _warm_hours(self) -> float:
        """Initial replicas were requested startup_s before the day; that warm-up is not billed."""
        return self.config.pool.initial_replicas * self.config.pool.startup_s / 3600.0
