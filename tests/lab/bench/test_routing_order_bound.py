"""The order-preserving bound (routing_order_bound.py): each stated rule, worked by hand, and its claim
checked against every order-preserving schedule of small pools."""

import itertools
import random

import pytest

from dspine_lab.bench.routing_order_bound import order_bound_p99, order_bound_ttfts


def test_rule_each_request_starts_when_it_arrives_or_the_first_replica_frees():
    # Two replicas. a (0 s, 5 s of prefill) and b (0 s, 3 s) start at once; c arrives at 1 s, the first
    # replica frees at 3 s (b's): c prefills over [3, 5], 4 s after it arrived.
    assert order_bound_ttfts([(0.0, 5.0), (0.0, 3.0), (1.0, 2.0)], 2) == [5.0, 3.0, 4.0]


def test_rule_requests_are_taken_in_order_of_arrival_and_answers_keep_the_given_order():
    assert order_bound_ttfts([(1.0, 2.0), (0.0, 5.0), (0.0, 3.0)], 2) == [4.0, 5.0, 3.0]


def test_rule_arrival_ties_go_in_the_order_given():
    # One replica, both sent at 0: the first listed prefills first, the second waits its 2 s.
    assert order_bound_ttfts([(0.0, 2.0), (0.0, 1.0)], 1) == [2.0, 3.0]
    assert order_bound_ttfts([(0.0, 1.0), (0.0, 2.0)], 1) == [1.0, 3.0]


def test_rule_an_idle_pool_gives_each_request_its_floor():
    # One replica: a over [0, 2]; b arrives at 1 and waits until 2 (3 s); c arrives at 10, idle: its floor.
    assert order_bound_ttfts([(0.0, 2.0), (1.0, 2.0), (10.0, 1.0)], 1) == [2.0, 3.0, 1.0]


def test_rule_p99_is_numpys_linear_percentile_of_the_bound_ttfts():
    # TTFTs 5, 3, 4: ascending 3, 4, 5; position 0.99 * 2 = 1.98 -> 4 + 0.98 * (5 - 4) = 4.98.
    assert order_bound_p99([(0.0, 5.0), (0.0, 3.0), (1.0, 2.0)], 2) == pytest.approx(4.98)
    assert order_bound_p99([], 4) is None


def test_rule_bad_parameters_are_refused_with_their_name():
    with pytest.raises(ValueError, match="num_replicas"):
        order_bound_ttfts([(0.0, 1.0)], 0)
    with pytest.raises(ValueError, match="floor"):
        order_bound_ttfts([(0.0, -1.0)], 2)


def _starts(requests, assignment, num_replicas, keep_order=True):
    """Start of each request when request i (in arrival order) goes to replica assignment[i], first come
    first served there, starting as early as its arrival, its replica and (keep_order) the previous
    request's start allow."""
    free = [0.0] * num_replicas
    last_start = 0.0
    starts = []
    for (sent_s, size_s), replica in zip(requests, assignment):
        start = max(sent_s, free[replica], last_start if keep_order else 0.0)
        free[replica] = start + size_s
        last_start = start
        starts.append(start)
    return starts


@pytest.mark.parametrize("num_replicas", [1, 2, 3])
def test_claim_no_order_preserving_schedule_starts_a_request_earlier(num_replicas):
    rng = random.Random(num_replicas)
    for _ in range(40):
        n = 6
        sent = sorted(round(rng.uniform(0.0, 6.0), 1) for _ in range(n))
        floors = [round(rng.uniform(0.1, 5.0), 1) for _ in range(n)]
        bound_starts = [s + t - f for s, f, t in zip(sent, floors, order_bound_ttfts(list(zip(sent, floors)), num_replicas))]
        # Prefills take at least the floor (no cache saves more than the ideal one): try both.
        for sizes in (floors, [f + rng.uniform(0.0, 1.0) for f in floors]):
            for assignment in itertools.product(range(num_replicas), repeat=n):
                starts = _starts(list(zip(sent, sizes)), assignment, num_replicas)
                for start, bound in zip(starts, bound_starts):
                    assert start >= bound - 1e-9


def test_claim_only_overtaking_goes_below_it():
    # Two replicas; a and b (10 s each) at 0 s, c (1 s) at 1 s. The bound starts c when a replica frees:
    # at 10 s. Placing b behind a lets c start at 1 s, before b: c overtakes b, and b pays for it.
    requests = [(0.0, 10.0), (0.0, 10.0), (1.0, 1.0)]
    assert order_bound_ttfts(requests, 2) == [10.0, 10.0, 10.0]
    assert _starts(requests, (0, 0, 1), 2, keep_order=False) == [0.0, 10.0, 1.0]  # TTFTs 10, 20, 1
    assert _starts(requests, (0, 0, 1), 2, keep_order=True) == [0.0, 10.0, 10.0]
