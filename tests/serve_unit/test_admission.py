"""serve/admission.py: the rate, wait and refusal rules, worked out by hand on an injected clock."""

import pytest

from ray_dspine.serve.admission import DEADLINE_HEADER, Admission, PoolAdmission, parse_deadline_ms


class Clock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def pool(clock, slots=2, window_completions=32, min_completions=4, max_queue_wait_s=30.0):
    return PoolAdmission(slots, window_completions, min_completions, max_queue_wait_s, fallback_retry_after_s=1,
                         clock=clock)  # fmt: skip


def measured(clock, service_s=0.5, **kwargs):
    """A pool that saw 10 completions of `service_s` each, ending at t = 0.5, 1.0, ..., 5.0."""
    admission = pool(clock, **kwargs)
    admission.begin(deadline_s=100.0).end(completed=False)  # its first request, at t = 0, starts the span
    for index in range(1, 11):
        admission.record_completion(0.5 * index, service_s)
    clock.now = 5.0
    return admission


def test_rate_is_completions_per_second_over_the_window():
    clock = Clock()
    admission = measured(clock)
    estimate = admission.estimate()
    # the oldest began at 0.5 - 0.5 = 0 and the newest ended at 5.0: 10 completions in 5 s -> 2 per second; each took 0.5 s -> S = 0.5 s; nothing in flight -> no wait
    assert estimate.rate_per_s == pytest.approx(2.0)
    assert estimate.mean_service_s == pytest.approx(0.5)
    assert (estimate.in_flight, estimate.queue_wait_s) == (0, 0.0)


def test_wait_is_the_queue_ahead_over_the_rate():
    clock = Clock()
    admission = measured(clock)
    tickets = [admission.begin(deadline_s=100.0) for _ in range(6)]
    estimate = admission.estimate()
    # 6 in flight, 2 running slots -> 4 queued ahead, leaving at 2/s -> W_q = (6 - 2) / 2 = 2 s
    assert estimate.in_flight == 6 and estimate.queue_wait_s == pytest.approx(2.0)
    assert len(tickets) == 6


def test_unmeetable_deadline_is_refused_with_the_seconds_until_it_would_fit():
    clock = Clock()
    admission = measured(clock)
    for _ in range(6):
        admission.begin(deadline_s=100.0)
    verdict = admission.decide(budget_s=1.0)
    # completion estimate W_q + S = 2 + 0.5 = 2.5 s > 1 s -> refused. It fits once the wait is at most
    # B - S = 1 - 0.5 = 0.5 s, i.e. after 2 - 0.5 = 1.5 s of draining -> Retry-After ceil(1.5) = 2
    assert (verdict.admit, verdict.code, verdict.retry_after_s) == (False, "deadline_unmeetable", 2)
    # a deadline of 2.5 s is met exactly (2.5 is not > 2.5): admitted
    assert admission.decide(budget_s=2.5).admit
    # service alone (0.5 s) over a 0.4 s deadline: the whole queue must drain, ceil(2 - 0) = 2
    assert admission.decide(budget_s=0.4).retry_after_s == 2


def test_queue_wait_over_the_limit_is_refused():
    clock = Clock()
    admission = measured(clock, max_queue_wait_s=1.0)
    for _ in range(9):
        admission.begin(deadline_s=100.0)
    verdict = admission.decide(budget_s=60.0)
    # W_q = (9 - 2) / 2 = 3.5 s > 1 s: refused, Retry-After ceil(3.5 - 1) = 3
    assert (verdict.admit, verdict.code, verdict.retry_after_s) == (False, "queue_wait_too_long", 3)


def test_retry_after_is_at_least_one_second():
    clock = Clock()
    admission = measured(clock, service_s=2.0)
    # nothing queued, S = 2 s over a 1 s deadline: W_q - max(0, B - S) = 0 -> at least 1
    verdict = admission.decide(budget_s=1.0)
    assert (verdict.admit, verdict.retry_after_s) == (False, 1)


def test_cold_pool_admits_everything_and_backpressure_uses_the_fallback():
    clock = Clock()
    admission = pool(clock)
    for _ in range(50):
        admission.begin(deadline_s=100.0)
    admission.record_completion(1.0, 9.0)  # one completion: below min_completions (4)
    clock.now = 2.0
    assert admission.estimate() is None
    assert admission.decide(budget_s=0.001).admit
    assert admission.busy_retry_after_s() == 1  # the configured fallback


def test_busy_retry_after_comes_from_the_wait():
    clock = Clock()
    admission = measured(clock)
    for _ in range(9):
        admission.begin(deadline_s=100.0)
    # W_q = (9 - 2) / 2 = 3.5 s -> Retry-After ceil(3.5) = 4
    assert admission.busy_retry_after_s() == 4


def test_the_window_keeps_the_newest_completions_and_tickets_end_once():
    clock = Clock()
    admission = measured(clock, window_completions=4)
    # only the newest 4 remain: ending at 3.5, 4.0, 4.5, 5.0; the oldest began at 3.5 - 0.5 = 3.0
    # -> span 5.0 - 3.0 = 2 s, 4 / 2 = 2 per second
    assert admission.estimate().rate_per_s == pytest.approx(2.0)
    clock.now = 500.0  # a quiet spell keeps the last busy period's figures: still measured
    assert admission.estimate().rate_per_s == pytest.approx(2.0)
    ticket = admission.begin(deadline_s=1000.0)
    clock.now = 501.0
    ticket.end(completed=True)
    ticket.end(completed=True)  # idempotent: one completion of 1 s, not two
    estimate = admission.estimate()
    # newest 4: 4.0, 4.5, 5.0 (0.5 s each) and 501.0 (1 s); span 501.0 - (4.0 - 0.5) = 497.5 s
    # -> rate 4 / 497.5; S = (0.5 x 3 + 1.0) / 4 = 0.625
    assert estimate.rate_per_s == pytest.approx(4 / 497.5) and estimate.mean_service_s == pytest.approx(0.625)
    assert estimate.in_flight == 0
    # a completion whose replica time is known (0.4 s on the replica, after 0.6 s queued): that is its service
    on_replica = admission.begin(deadline_s=1000.0)
    clock.now = 502.0
    on_replica.end(completed=True, service_s=0.4)
    # newest 4: 4.5, 5.0, 501.0, 502.0 -> S = (0.5 + 0.5 + 1.0 + 0.4) / 4 = 0.6
    assert admission.estimate().mean_service_s == pytest.approx(0.6)
    failed = admission.begin(deadline_s=1000.0)
    failed.end(completed=False)  # an error ends without a completion: the window is unchanged
    assert admission.estimate().mean_service_s == pytest.approx(0.6)


def test_fewer_completions_than_the_minimum_leave_the_pool_unmeasured():
    clock = Clock()
    admission = pool(clock, min_completions=3)
    for ended in (1.0, 2.0):
        admission.record_completion(ended, 1.0)
    assert admission.estimate() is None  # 2 < 3
    admission.record_completion(3.0, 1.0)
    # 3 completions from 1.0 - 1.0 = 0 to 3.0 -> 1 per second
    assert admission.estimate().rate_per_s == pytest.approx(1.0)


def test_a_request_is_counted_in_flight_no_longer_than_its_deadline():
    clock = Clock()
    admission = measured(clock)
    admission.begin(deadline_s=6.0)
    admission.begin(deadline_s=60.0)
    assert admission.in_flight() == 2
    clock.now = 6.0  # the first one's deadline: the ingress has answered it by now, lost end or not
    assert admission.in_flight() == 1


def test_span_runs_from_the_oldest_service_start():
    clock = Clock(100.0)
    admission = pool(clock)
    tickets = [admission.begin(deadline_s=1000.0) for _ in range(4)]
    clock.now = 102.0
    for ticket in tickets:
        ticket.end(completed=True)
    # 4 completions that all began at 100 and ended at 102: span 2 s -> 2 per second; each took 2 s
    estimate = admission.estimate()
    assert estimate.rate_per_s == pytest.approx(2.0) and estimate.mean_service_s == pytest.approx(2.0)


def test_slots_are_replicas_times_ongoing_over_ingress_replicas():
    from ray_dspine.config import AppConfig

    config = AppConfig.model_validate({
        "server": {"num_ingress_replicas": 2, "max_queue_wait_s": 7.0},
        "pools": [{"name": "p", "engine": {"kind": "simulated"},
                   "deployment": {"num_replicas": 3, "max_ongoing_requests": 8}}],
        "traffic": {"default_reasoning_level": "none", "rules": [{"reasoning_levels": ["none"], "pool": "p"}]},
    })  # fmt: skip
    admission = Admission.from_config(config, Clock())
    # 3 replicas x 8 ongoing / 2 ingress replicas = 12 slots at this ingress
    assert admission.pool("p").slots == 12 and admission.pool("p").max_queue_wait_s == 7.0


@pytest.mark.parametrize("value", ["", "0", "-5", "1.5", "abc", "12ms", "+3", "١٢", "9" * 13])
def test_bad_deadline_header_values_are_refused_naming_the_header(value):
    with pytest.raises(ValueError, match=DEADLINE_HEADER):
        parse_deadline_ms(value)


def test_deadline_header_values():
    assert parse_deadline_ms(None) is None
    assert parse_deadline_ms("1500") == 1.5
    assert parse_deadline_ms(" 250 ") == 0.25


def test_a_request_is_held_to_the_90th_percentile_of_service_not_the_mean():
    clock = Clock()
    admission = pool(clock)
    for index in range(1, 11):  # services 1, 2, ..., 10 s ending at t = 10, 11, ..., 19
        admission.record_completion(9.0 + index, float(index))
    clock.now = 19.0
    estimate = admission.estimate()
    # the oldest began at 10 - 1 = 9, the newest ended at 19: 10 in 10 s -> 1/s; mean 5.5 s;
    # 90th percentile by nearest rank: the ceil(0.9 x 10) = 9th smallest = 9 s
    assert estimate.rate_per_s == pytest.approx(1.0)
    assert (estimate.mean_service_s, estimate.p90_service_s) == (pytest.approx(5.5), 9.0)
    # nothing queued: 8 s of budget would do for the mean but not for S90 = 9 s -> refused, Retry-After at least 1
    verdict = admission.decide(budget_s=8.0)
    assert (verdict.admit, verdict.code, verdict.status, verdict.retry_after_s) == (False, "deadline_unmeetable", 429, 1)
    assert admission.decide(budget_s=9.0).admit


def test_an_outage_runs_from_the_first_snapshot_without_a_replica_to_the_next_with_one():
    clock = Clock(100.0)
    admission = pool(clock)
    assert admission.recovery_left_s() == 0.0  # up (no snapshot says otherwise)
    assert admission.replicas_running(0) is True  # the outage begins at t = 100
    clock.now = 110.0
    assert admission.replicas_running(0) is False  # still the same outage
    clock.now = 130.0
    assert admission.replicas_running(1) is False and admission.down_since is None
    assert admission.recovery_s == pytest.approx(30.0)  # 130 - 100


def test_a_down_pool_refuses_with_503_what_cannot_wait_for_its_recovery():
    clock = Clock(100.0)
    admission = pool(clock)
    admission.replicas_running(0)
    clock.now = 130.0
    admission.replicas_running(1)  # R = 30 s measured
    clock.now = 200.0
    admission.replicas_running(0)  # down again at t = 200
    clock.now = 205.0
    # unmeasured pool: D = 200 + 30 - 205 = 25 s, S90 taken as 0
    assert admission.recovery_left_s() == pytest.approx(25.0)
    verdict = admission.decide(budget_s=20.0)
    assert (verdict.admit, verdict.status, verdict.code, verdict.retry_after_s) == (False, 503, "pool_unavailable", 25)
    assert admission.decide(budget_s=30.0).admit  # 25 s fits in 30 s: Ray holds it until the replica is back


def test_recovery_falls_back_to_the_configured_estimate_and_then_to_the_fallback_retry_after():
    clock = Clock()
    admission = PoolAdmission(2, 32, 4, 30.0, fallback_retry_after_s=3, clock=clock, fallback_recovery_s=60.0)
    admission.replicas_running(0)  # the ingress's first snapshot: the replicas still load
    clock.now = 10.0
    # nothing measured yet: D = 0 + 60 - 10 = 50 s
    verdict = admission.decide(budget_s=40.0)
    assert (verdict.status, verdict.code, verdict.retry_after_s) == (503, "pool_unavailable", 50)
    for index in range(1, 11):  # then 10 completions of 0.5 s (the replica came and went meanwhile)
        admission.record_completion(60.0 + 0.5 * index, 0.5)
    clock.now = 70.0
    # the outage has outlasted its 60 s: D = 0, so the request needs S90 = 0.5 s; a 0.4 s budget is refused
    # with the fallback Retry-After of 3 s, a 1 s budget admitted
    verdict = admission.decide(budget_s=0.4)
    assert (verdict.status, verdict.code, verdict.retry_after_s) == (503, "pool_unavailable", 3)
    assert admission.decide(budget_s=1.0).admit


def test_a_down_pool_adds_its_recovery_to_the_queue_wait():
    clock = Clock()
    admission = measured(clock)  # 2/s, S90 0.5 s, t = 5
    for _ in range(6):
        admission.begin(deadline_s=100.0)  # W_q = (6 - 2) / 2 = 2 s
    admission.replicas_running(0)  # down at t = 5; R unknown -> the default 60 s
    clock.now = 15.0
    # D = 5 + 60 - 15 = 50 s; 50 + 2 + 0.5 = 52.5 s: refused at 52 s, admitted at 52.5 s
    assert admission.decide(budget_s=52.0).code == "pool_unavailable"
    assert admission.decide(budget_s=52.5).admit
