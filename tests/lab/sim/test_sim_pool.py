"""Pool rules: balance, removal order."""

from ray_dspine.autoscale.config import SloTargets
from ray_dspine.engines.simulated.profile import load_profile
from dspine_lab.sim.config import PoolSimConfig
from dspine_lab.sim.pool import SERVING, STARTING, SimPool


def pool(**kw) -> SimPool:
    config = PoolSimConfig(name="p", slo=SloTargets(ttft_slo_s=1.0, itl_slo_ms=50.0), max_ongoing_requests=2, **kw)
    return SimPool(config, load_profile("h200-qwen3.8-27b"), lambda: 0.0, seed=0, keep_history_s=60.0)


def test_rule_balance_least_ongoing_then_oldest():
    p = pool()
    a, b, c = (p.start_replica(0.0) for _ in range(3))
    for r in (a, b):
        p.make_ready(r)
    a.ongoing, b.ongoing = 1, 1
    assert p.pick() is a  # tie: the oldest; c is still starting
    b.ongoing = 0
    assert p.pick() is b
    a.ongoing = b.ongoing = 2  # both full (max_ongoing_requests 2)
    assert p.pick() is None


def test_rule_remove_starting_first_then_least_loaded():
    p = pool()
    r = [p.start_replica(0.0) for _ in range(4)]
    for replica in r[:3]:
        p.make_ready(replica)
    r[0].ongoing, r[1].ongoing, r[2].ongoing = 3, 1, 1
    assert r[3].state == STARTING and r[0].state == SERVING
    # starting r3 first, then the least loaded serving (r1, r2 tie -> the newest, r2), then r1
    assert p.choose_to_remove(3) == [r[3], r[2], r[1]]
