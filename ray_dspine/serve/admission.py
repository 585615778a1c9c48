"""Admission by time: a request whose estimated completion would pass its deadline is refused at once.

Each pool is measured from what this ingress sees of it (pure; the clock is injected, seconds):
  rate       over the last `window_completions` completions of the pool seen here (K of them; fewer at start):
             mu = K / span, where span runs from the start of the oldest one's service to the end of the newest.
             Service time: the seconds those completions spent on their replica, from reaching it to their last
             chunk (the first chunk's replica seconds plus the time after it; from admission when the replica's
             share is unknown), so time queued in Ray is not counted twice. S = their mean; S90 = their 90th
             percentile (nearest rank: the ceil(0.9 K)-th smallest), the service a request is held to.
             Only requests that finished normally count as completions; errors, timeouts and requests the
             client left end without one. The window is counted in completions, not seconds, so a quiet
             spell keeps the last busy period's figures instead of turning the pool unmeasured.
  in flight  n = requests admitted at this ingress and not yet ended. A request is counted no longer than
             its own deadline (by then the ingress has answered it), so a lost end cannot inflate n.
  slots      c = the requests the pool runs at once, as this ingress's share: replicas x
             max_ongoing_requests / ingress replicas. Beyond c, requests wait in Ray's queue.
  wait       Little's law (L = lambda x W) applied to that queue: it holds n - c requests ahead of a new one
             and they leave it at the rate mu, so the new request waits W_q = max(0, n - c) / mu seconds.
  estimate   completion = now + W_q + S90: a request's own service is taken at the 90th percentile, so one
             longer than average still ends before its deadline instead of running into it (a late 504).
  outage     the health monitor's snapshots (health.py) tell the pool's RUNNING replicas: the pool is down from
             the first snapshot with none (the ingress's first snapshot, while the replicas still load, counts)
             until one shows a RUNNING replica again. Its recovery time R is the length of its last outage
             measured so, or `fallback_recovery_s` until one has been. While down, the pool starts nothing
             before D = max(0, down_since + R - now) seconds from now, so every wait below starts with D.
  refuse     with B the seconds left before the request's deadline and W = D + W_q:
             - down and W + S90 > B (S90 = 0 while unmeasured): 503 `pool_unavailable`; Retry-After = ceil(D),
               at least 1, or `fallback_retry_after_s` once the outage has outlasted R.
             - W + S90 > B: 429 `deadline_unmeetable`; Retry-After = ceil(W_q - max(0, B - S90)) seconds, at
               least 1: the time until the queue ahead has drained to what B leaves room for (all of it
               when S90 alone exceeds B).
             - otherwise W_q > max_queue_wait_s: 429 `queue_wait_too_long`; Retry-After =
               ceil(W_q - max_queue_wait_s), at least 1.
  cold       until the pool has `min_completions` completions here it is unmeasured: every request the outage
             rule lets through is admitted and Ray's max_queued_requests bounds the queue by count.
  busy       Ray's own BackPressureError (its queue is full) is a 503 whose Retry-After comes from the
             same estimate: ceil(W_q), at least 1; `fallback_retry_after_s` while the pool is unmeasured.

Deadline of a request: `server.request_timeout_s` after it reached the ingress, or sooner when the client
sends the header `x-dspine-deadline-ms: <milliseconds from when the ingress reads the request>` (a positive
integer, ASCII digits only; anything else is a 400 naming the header). The earlier of the two is also the
ingress's end-to-end deadline for the request: one admitted that runs late is answered 504
`deadline_margin_ms` (at most half the header's time) before a header deadline, never left hanging.
Requests already admitted are judged again when an outage begins (ingress.py): one still waiting for its
first chunk that the outage rule would now refuse gets that 503 at once instead of waiting out its deadline.
Complexity: O(window completions log window completions + in-flight requests) per decision.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

DEADLINE_HEADER = "x-dspine-deadline-ms"
MAX_DEADLINE_DIGITS = 12  # about 31 years in milliseconds: anything longer is a typo, not a deadline

Clock = Callable[[], float]


def parse_deadline_ms(value: str | None) -> float | None:
    """Seconds from now named by an x-dspine-deadline-ms value; None when the header is absent.

    Raises ValueError (its message names the header and the fix) for anything but a positive integer."""
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > MAX_DEADLINE_DIGITS or not (text.isascii() and text.isdigit()):
        raise ValueError(
            f"{DEADLINE_HEADER} must be a positive integer number of milliseconds from now (at most "
            f"{MAX_DEADLINE_DIGITS} digits), got {value[:40]!r}"
        )
    milliseconds = int(text)
    if milliseconds <= 0:
        raise ValueError(f"{DEADLINE_HEADER} must be a positive integer number of milliseconds from now, got {text}")
    return milliseconds / 1000.0


@dataclass(frozen=True)
class Estimate:
    """What the pool's measurements say about a request arriving now."""

    rate_per_s: float  # mu
    mean_service_s: float  # S
    p90_service_s: float  # S90
    in_flight: int  # n
    slots: float  # c
    queue_wait_s: float  # W_q


@dataclass(frozen=True)
class Verdict:
    admit: bool
    code: str | None = None
    message: str | None = None
    retry_after_s: int | None = None
    estimate: Estimate | None = None
    status: int = 429  # of a refusal


def _at_least_one_second(seconds: float) -> int:
    return max(1, math.ceil(seconds - 1e-9))  # 2.0000000001 from float noise is still 2


class Ticket:
    """One admitted request; `end` is idempotent."""

    def __init__(self, pool: "PoolAdmission", key: int, began_s: float):
        self._pool = pool
        self._key = key
        self.began_s = began_s
        self._ended = False

    def end(self, completed: bool, service_s: float | None = None) -> None:
        """The request ended; a completion's service time is `service_s`, or the time since admission."""
        if self._ended:
            return
        self._ended = True
        self._pool._end(self._key, self.began_s, completed, service_s)


class PoolAdmission:
    """The measurements and the admission rule (module docstring) of one pool at this ingress."""

    def __init__(self, slots: float, window_completions: int, min_completions: int, max_queue_wait_s: float,
                 fallback_retry_after_s: int, clock: Clock, fallback_recovery_s: float = 60.0):  # fmt: skip
        self.slots = slots
        self.fallback_recovery_s = fallback_recovery_s
        self.min_completions = min_completions
        self.max_queue_wait_s = max_queue_wait_s
        self.fallback_retry_after_s = fallback_retry_after_s
        self._clock = clock
        # (ended at, service seconds) of the newest completions, oldest first
        self._completions: deque[tuple[float, float]] = deque(maxlen=window_completions)
        self._in_flight: dict[int, float] = {}  # key -> deadline
        self._keys = itertools.count()
        self.down_since: float | None = None  # rule outage
        self.recovery_s: float | None = None  # R, once an outage has been measured

    def begin(self, deadline_s: float) -> Ticket:
        now = self._clock()
        key = next(self._keys)
        self._in_flight[key] = deadline_s
        return Ticket(self, key, now)

    def record_completion(self, ended_s: float, service_s: float) -> None:
        self._completions.append((ended_s, service_s))

    def _end(self, key: int, began_s: float, completed: bool, service_s: float | None) -> None:
        self._in_flight.pop(key, None)
        if completed:
            now = self._clock()
            self.record_completion(now, now - began_s if service_s is None else service_s)

    def replicas_running(self, count: int) -> bool:
        """Rule outage: a snapshot shows `count` RUNNING replicas now. True when it begins an outage."""
        now = self._clock()
        if count < 1:
            if self.down_since is None:
                self.down_since = now
                return True
            return False
        if self.down_since is not None:
            self.recovery_s = now - self.down_since
            self.down_since = None
        return False

    def recovery_left_s(self) -> float:
        """D of rule outage: 0 while the pool is up."""
        if self.down_since is None:
            return 0.0
        recovery = self.fallback_recovery_s if self.recovery_s is None else self.recovery_s
        return max(0.0, self.down_since + recovery - self._clock())

    def in_flight(self) -> int:
        now = self._clock()
        for key in [key for key, deadline in self._in_flight.items() if deadline <= now]:
            del self._in_flight[key]
        return len(self._in_flight)

    def estimate(self) -> Estimate | None:
        """Rule rate, in flight and wait; None while the pool is unmeasured (rule cold)."""
        count = len(self._completions)
        if count < self.min_completions:
            return None
        oldest_end, oldest_service = self._completions[0]
        span = max(end for end, _ in self._completions) - (oldest_end - oldest_service)
        if span <= 0:
            return None
        rate = count / span
        services = sorted(service for _, service in self._completions)
        p90 = services[math.ceil(0.9 * count) - 1]
        n = self.in_flight()
        wait = max(0.0, n - self.slots) / rate
        return Estimate(rate_per_s=rate, mean_service_s=sum(services) / count, p90_service_s=p90, in_flight=n,
                        slots=self.slots, queue_wait_s=wait)  # fmt: skip

    def decide(self, budget_s: float) -> Verdict:
        """Rule refuse for a request with `budget_s` seconds left before its deadline."""
        estimate = self.estimate()
        down = self.down_since is not None
        if estimate is None and not down:
            return Verdict(admit=True)
        recovery = self.recovery_left_s()
        queued = estimate.queue_wait_s if estimate is not None else 0.0
        service = estimate.p90_service_s if estimate is not None else 0.0
        wait = recovery + queued
        if down and wait + service > budget_s:
            retry = _at_least_one_second(recovery) if recovery > 0 else self.fallback_retry_after_s
            message = (
                f"the pool has no healthy replica (down for {self._clock() - self.down_since:.1f} s); it would "
                f"complete this request in about {wait + service:.1f} s ({recovery:.1f} s until a replica is "
                f"expected back), after its deadline {budget_s:.1f} s from now; retry in {retry} s"
            )
            return Verdict(False, "pool_unavailable", message, retry, estimate, status=503)
        if estimate is None:
            return Verdict(admit=True)
        if wait + service > budget_s:
            retry = _at_least_one_second(queued - max(0.0, budget_s - service))
            message = (
                f"the pool would complete this request in about {wait + service:.1f} s ({queued:.1f} s queued "
                f"behind {estimate.in_flight} requests in flight, {service:.1f} s service at the 90th "
                f"percentile), after its deadline {budget_s:.1f} s from now; retry in {retry} s or allow a "
                f"later deadline"
            )
            return Verdict(False, "deadline_unmeetable", message, retry, estimate)
        if queued > self.max_queue_wait_s:
            retry = _at_least_one_second(queued - self.max_queue_wait_s)
            message = (
                f"the pool's queue would hold this request about {queued:.1f} s, over the server's "
                f"max_queue_wait_s of {self.max_queue_wait_s:g} s; retry in {retry} s"
            )
            return Verdict(False, "queue_wait_too_long", message, retry, estimate)
        return Verdict(True, estimate=estimate)

    def busy_retry_after_s(self) -> int:
        """Rule busy: Retry-After of a 503 for Ray's full queue."""
        estimate = self.estimate()
        if estimate is None:
            return self.fallback_retry_after_s
        return _at_least_one_second(estimate.queue_wait_s)


class Admission:
    """Every pool's PoolAdmission at one ingress."""

    def __init__(self, slots_by_pool: dict[str, float], *, window_completions: int, min_completions: int,
                 max_queue_wait_s: float, fallback_retry_after_s: int, clock: Clock,
                 fallback_recovery_s: float = 60.0):  # fmt: skip
        self.pools = {
            name: PoolAdmission(slots, window_completions, min_completions, max_queue_wait_s,
                                fallback_retry_after_s, clock, fallback_recovery_s)  # fmt: skip
            for name, slots in slots_by_pool.items()
        }

    @classmethod
    def from_config(cls, config, clock: Clock) -> "Admission":
        """Slots per pool from an AppConfig (rule slots); the other figures from its ServerConfig."""
        server = config.server
        slots = {
            pool.name: pool.deployment.num_replicas * pool.deployment.max_ongoing_requests / server.num_ingress_replicas
            for pool in config.pools
        }
        return cls(slots, window_completions=server.admission_window_completions, min_completions=server.admission_min_completions,
                   max_queue_wait_s=server.max_queue_wait_s, fallback_retry_after_s=server.retry_after_s,
                   clock=clock, fallback_recovery_s=server.pool_recovery_estimate_s)  # fmt: skip

    def pool(self, name: str) -> PoolAdmission:
        return self.pools[name]
