"""Memory wait (ray_dspine/routing/memory_wait.py): one test per stated rule, figures worked by hand."""

import math

import pytest

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.config import MemoryWaitHold, RouterConfig
from ray_dspine.routing.estimate import Estimate
from ray_dspine.routing.memory_wait import MemoryWait, eligible
from ray_dspine.routing.pipeline import RoutingPipeline
from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.types import ReplicaView, RequestView

RATE = 10_000.0  # prefill tokens per second


def view(rid, backlog_tokens=0, free_kv_tokens=100_000, total_kv_tokens=100_000, age=0.0, healthy=True):
    load = LoadSnapshot(
        healthy=healthy,
        total_kv_tokens=total_kv_tokens,
        free_kv_tokens=free_kv_tokens,
        pending_prefill_tokens=backlog_tokens,
        prefill_tokens_per_s=RATE,
    )
    return ReplicaView(rid, load, age)


def request(prompt_tokens=10_000, hashes=("h0", "h1", "h2", "h3")):
    return RequestView("q", prefix_hashes=hashes, prompt_tokens=prompt_tokens, needed_kv_tokens=prompt_tokens + 100)


def test_rule_eligible_replicas_could_hold_the_request_once_memory_frees():
    q = request()
    replicas = [
        view("full", free_kv_tokens=0),  # short of memory now: eligible
        view("small", total_kv_tokens=5_000, free_kv_tokens=5_000),  # could never hold 10,100 tokens
        view("sick", healthy=False),
        view("silent", age=61.0),  # older than drop_after_s 60
        view("new", age=math.inf),  # never reported
        view("free"),
    ]
    assert [v.replica_id for v in eligible(q, replicas, drop_after_s=60.0)] == ["full", "free"]


class IndexedRule:
    """A MemoryWait and the prefix index its decisions' shared estimates are built from."""

    def __init__(self, index: PrefixIndex, **params):
        self.index = index
        self.rule = MemoryWait(**params)

    def hold(self, q, chosen, kept, replicas):
        return self.rule.hold(Estimate.of(q, self.index, RATE), chosen, kept, replicas)


def hold(rule, q, chosen, kept, replicas):
    by_id = {v.replica_id: v for v in replicas}
    return rule.hold(q, by_id[chosen], [by_id[k] for k in kept], replicas)


def test_rule_hold_when_the_chosen_replica_would_start_it_more_than_the_tolerance_later():
    rule = IndexedRule(PrefixIndex(), tolerance_s=4.0, drop_after_s=60.0)
    q = request()  # 10,000 tokens, nothing cached: 1.0 s of its own prefill on either replica
    # est: fits 90,000 / 10,000 + 1 = 10.0 s; full 20,000 / 10,000 + 1 = 3.0 s; 10 > 3 + 4, and 9 > 2 s queued
    replicas = [view("fits", backlog_tokens=90_000), view("full", backlog_tokens=20_000, free_kv_tokens=0)]
    assert hold(rule, q, "fits", ["fits"], replicas) == (
        "waiting for memory on full: predicted TTFT 3.00s there (2.00s of prefill queued) against 10.00s on "
        "fits (9.00s queued), which can hold it now (allowed 4.00s; waited 0.00s)"
    )
    # 7.0 s on the chosen replica is exactly 3 + 4: placed (the rule holds only beyond the tolerance)
    assert hold(rule, q, "fits", ["fits"], [view("fits", backlog_tokens=60_000), replicas[1]]) is None


def test_rule_only_replicas_short_of_memory_are_waited_for():
    rule = IndexedRule(PrefixIndex(), tolerance_s=4.0, drop_after_s=60.0)
    q = request()
    # "fast" (no backlog) fits now as well: choosing between replicas that fit is the TTFT guard's job
    replicas = [view("slow", backlog_tokens=90_000), view("fast")]
    assert hold(rule, q, "slow", ["slow", "fast"], replicas) is None
    # the same "fast" short of memory: the request waits for it
    assert hold(rule, q, "slow", ["slow"], replicas).startswith("waiting for memory on fast: predicted TTFT 1.00s")


def rule_where_home_caches_all_of_a_40k_prompt(
    clock=lambda: 0.0, max_tracked: int = 10_000
) -> tuple[IndexedRule, RequestView]:
    """A 2 s rule whose index has all four of the request's blocks on "home"; the request is 40,000 tokens
    (4.0 s of prefill wherever it is not cached, 0 s on home)."""
    index = PrefixIndex()
    index.insert(["h0", "h1", "h2", "h3"], "home")
    rule = IndexedRule(index, tolerance_s=2.0, drop_after_s=60.0, clock=clock, max_tracked=max_tracked)
    return rule, request(prompt_tokens=40_000)


def test_rule_r_star_is_the_short_replica_with_the_lowest_estimate():
    # "near" has less queued (1.0 s) but nothing cached: est 1 + 4 = 5 s; "home" has 2.0 s queued and
    # caches the whole 40,000-token prompt: est 2 s. r* = home; fits: 30,000 queued + 40,000 = 7 s > 2 + 2
    rule, q = rule_where_home_caches_all_of_a_40k_prompt()
    replicas = [view("fits", backlog_tokens=30_000), view("near", backlog_tokens=10_000, free_kv_tokens=0),
                view("home", backlog_tokens=20_000, free_kv_tokens=0)]  # fmt: skip
    assert hold(rule, q, "fits", ["fits"], replicas).startswith("waiting for memory on home: predicted TTFT 2.00s")


def test_rule_the_requests_own_prefill_counts():
    # "home" caches the whole 40,000-token prompt and is full with nothing queued: est 0 s. "fits" has 2 s
    # queued and nothing cached: est 2 + 4 = 6 s > 0 + 2, and 2 s > 0 s queued: the request waits for home
    # (comparing backlogs alone, 2 <= 0 + 2 would have placed it on fits to prefill all 40,000 tokens).
    rule, q = rule_where_home_caches_all_of_a_40k_prompt()
    replicas = [view("fits", backlog_tokens=20_000), view("home", free_kv_tokens=0)]
    assert hold(rule, q, "fits", ["fits"], replicas) == (
        "waiting for memory on home: predicted TTFT 0.00s there (0.00s of prefill queued) against 6.00s on "
        "fits (2.00s queued), which can hold it now (allowed 2.00s; waited 0.00s)"
    )


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_rule_waited_bounds_the_hold_by_the_gain_once_backlogs_no_longer_do():
    # home caches the whole 40,000-token prompt and is full with nothing queued (est 0 s); fits has
    # nothing queued either and prefills all of it (est 4 s): gain = 4 - 0 - 2 = 2 s, and the backlogs
    # (0 <= 0) no longer bound the wait, so the request waits while it has waited less than 2 s.
    clock = Clock()
    rule, q = rule_where_home_caches_all_of_a_40k_prompt(clock)
    replicas = [view("fits"), view("home", free_kv_tokens=0)]
    assert hold(rule, q, "fits", ["fits"], replicas) == (
        "waiting for memory on home: predicted TTFT 0.00s there (0.00s of prefill queued) against 4.00s on "
        "fits (0.00s queued), which can hold it now (allowed 2.00s; waited 0.00s)"
    )
    clock.now = 101.9
    assert hold(rule, q, "fits", ["fits"], replicas).endswith("waited 1.90s)")
    clock.now = 102.0  # waited 2.0 s = the gain: waiting has used up what it could win, placed on fits
    assert hold(rule, q, "fits", ["fits"], replicas) is None
    # the rule let q go and forgot it: the next hold of the same request starts a fresh wait
    clock.now = 150.0
    assert hold(rule, q, "fits", ["fits"], replicas).endswith("waited 0.00s)")


def test_rule_gain_no_hold_when_waiting_cannot_win():
    # home 3 s queued (est 3 s), fits 2 s queued (est 6 s): gain = 6 - 3 - 2 = 1 s > 0, and 2 <= 3 s
    # queued: held while it has waited less than 1 s, whatever the backlogs
    clock = Clock()
    rule, q = rule_where_home_caches_all_of_a_40k_prompt(clock)
    replicas = [view("fits", backlog_tokens=20_000), view("home", backlog_tokens=30_000, free_kv_tokens=0)]
    assert hold(rule, q, "fits", ["fits"], replicas) is not None
    clock.now += 1.0
    assert hold(rule, q, "fits", ["fits"], replicas) is None
    # home 4 s queued (est 4 s): gain = 6 - 4 - 2 = 0, so no hold at all, even at the first call
    replicas = [view("fits", backlog_tokens=20_000), view("home", backlog_tokens=40_000, free_kv_tokens=0)]
    assert hold(rule, q, "fits", ["fits"], replicas) is None


def test_rule_waited_remembers_at_most_max_tracked_requests():
    clock = Clock()
    rule, first = rule_where_home_caches_all_of_a_40k_prompt(clock, max_tracked=1)
    second = RequestView("q2", prefix_hashes=first.prefix_hashes, prompt_tokens=40_000, needed_kv_tokens=40_100)
    replicas = [view("fits"), view("home", free_kv_tokens=0)]
    assert hold(rule, first, "fits", ["fits"], replicas) is not None  # first held at 100.0
    clock.now = 101.0
    assert hold(rule, second, "fits", ["fits"], replicas) is not None  # q2 held at 101.0; q dropped
    clock.now = 102.5  # q would have waited 2.5 s > the 2 s gain, but it was dropped: a fresh wait
    assert hold(rule, first, "fits", ["fits"], replicas).endswith("waited 0.00s)")


def test_rule_a_long_cached_prefix_on_the_chosen_replica_widens_the_allowance():
    index = PrefixIndex()
    index.insert(["h0", "h1", "h2"], "home")
    # 40,000-token prompt, 3 of 4 blocks cached on home: saved 30,000 tokens = 3.0 s of prefill there
    q = request(prompt_tokens=40_000)
    # est: home 100,000 / 10,000 + 10,000 / 10,000 = 11.0 s; other 0 + 40,000 / 10,000 = 4.0 s, but full
    replicas = [view("home", backlog_tokens=100_000), view("other", free_kv_tokens=0)]
    plain = IndexedRule(index, tolerance_s=4.0, drop_after_s=60.0)
    assert hold(plain, q, "home", ["home"], replicas) is not None  # 11 > 4 + 4
    # allow(home) = max(4, min(12, 4 * 3.0)) = 12 s: 11 <= 4 + 12, placed at home
    widened = IndexedRule(index, tolerance_s=4.0, drop_after_s=60.0, per_cached=4.0, cached_max_s=12.0)
    assert hold(widened, q, "home", ["home"], replicas) is None
    # the cap: allow = max(4, min(5, 12)) = 5 s: 11 > 4 + 5, held
    capped = IndexedRule(index, tolerance_s=4.0, drop_after_s=60.0, per_cached=4.0, cached_max_s=5.0)
    assert "allowed 5.00s" in hold(capped, q, "home", ["home"], replicas)


def test_rule_the_wait_ends_once_the_chosen_backlog_drains_to_the_tolerance():
    # In the pipeline the ledger drains a report's backlog at its rate while it ages: 100,000 tokens
    # reported on "fits" are 40,000 (4.0 s) after 6 s and 20,000 (2.0 s) after 8 s; "full" has none, the
    # request's own 10,000 tokens are 1 s on either, and the default tolerance is 2 s: held at est 11 s
    # and 5 s, placed at 3.0 <= 1 + 2.
    p = RoutingPipeline(RouterConfig(), clock=lambda: 100.0)
    q = request()
    full = view("full", free_kv_tokens=0)
    held = p.choose(q, [view("fits", backlog_tokens=100_000), full])
    assert held.wait and held.ranked_replica_ids == () and held.reason.startswith("waiting for memory on full")
    assert "kv:" in held.rejected["full"]
    assert p.choose(q, [view("fits", backlog_tokens=100_000, age=6.0), full]).wait
    placed = p.choose(q, [view("fits", backlog_tokens=100_000, age=8.0), full])
    assert placed.ranked_replica_ids == ("fits",) and not placed.wait


def test_rule_no_hold_listed_turns_the_wait_off():
    p = RoutingPipeline(RouterConfig(holds=[]), clock=lambda: 100.0)
    decision = p.choose(request(), [view("fits", backlog_tokens=100_000), view("full", free_kv_tokens=0)])
    assert decision.ranked_replica_ids == ("fits",)


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="tolerance_s must be >= 0"):
        IndexedRule(PrefixIndex(), tolerance_s=-1.0, drop_after_s=60.0)
    with pytest.raises(ValueError, match="drop_after_s must be > 0"):
        IndexedRule(PrefixIndex(), tolerance_s=4.0, drop_after_s=0.0)
    with pytest.raises(ValueError, match="max_tracked must be >= 1"):
        IndexedRule(PrefixIndex(), tolerance_s=4.0, drop_after_s=60.0, max_tracked=0)
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        MemoryWaitHold(tolerance_s=-0.5)
