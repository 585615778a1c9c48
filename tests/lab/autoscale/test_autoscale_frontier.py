"""The frontier's grids and choice rule (dspine_lab/autoscale/frontier.py) on hand-built tables."""

from types import SimpleNamespace

from dspine_lab.autoscale import frontier
from dspine_lab.autoscale.calibration import capacity_from_profile
from dspine_lab.autoscale.sim_pools import TWIN_POOLS
from ray_dspine.autoscale.config import CostAutoscalingConfig
from ray_dspine.engines.simulated.profile import load_profile


def row(index, attainment, cost, hours=1.0):
    return {"index": index, "slo_attainment": attainment, "cost_per_completed_request_usd": cost, "replica_hours": hours}


TABLE = [row(0, 0.999, 5.0), row(1, 0.991, 3.0), row(2, 0.975, 2.0), row(3, 0.96, 1.0), row(4, 0.991, 3.0, 0.5)]


def test_rule_choice_cheapest_meeting_the_target():
    # 95%: all qualify, cheapest is [3] (1.0); 97%: [0, 1, 2, 4] -> [2] (2.0);
    # 99%: [0, 1, 4] -> cost tie 3.0 between [1] and [4], fewer replica-hours wins: [4];
    # 99.5%: only [0]; 99.95%: none.
    assert frontier.choose(TABLE, 0.95)["index"] == 3
    assert frontier.choose(TABLE, 0.97)["index"] == 2
    assert frontier.choose(TABLE, 0.99)["index"] == 4
    assert frontier.choose(TABLE, 0.995)["index"] == 0
    assert frontier.choose(TABLE, 0.9995) is None


def test_rule_choice_tie_falls_to_grid_order():
    assert frontier.choose([row(5, 0.99, 1.0), row(2, 0.99, 1.0)], 0.99)["index"] == 2


def base_config(pool):
    capacity = capacity_from_profile(load_profile(pool.engine.profile), pool.engine)
    return CostAutoscalingConfig(slo=pool.slo, capacity=capacity, gpu_hour_usd=pool.gpu_hour_usd)


def test_rule_every_policy_gets_the_same_grid_size():
    pool = TWIN_POOLS["dspine-agent"][0]
    grid = frontier.grids(pool, base_config(pool), tuning_seed=0)
    assert set(grid) == set(frontier.POLICIES)
    assert {p: len(points) for p, points in grid.items()} == {p: 8 for p in frontier.POLICIES}
    for points in grid.values():  # distinct configurations, indexed in order
        assert [p.index for p in points] == list(range(8))
        assert len({tuple(sorted(p.params.items())) for p in points}) == 8
    ttft = [p.params["ttft_target_s"] for p in grid["ray-llm-ttft"]]
    assert min(ttft) == 0.25 and max(ttft) == 2.0  # the TTFT threshold spans 0.25-2 s
    assert {p.params["idle_threshold"] for p in grid["ray-llm-ttft"]} == {1.0, 8.0}


def test_rule_chosen_on_tuning_day_reported_on_held_out_day():
    # two policies with hand-set results: the tuning day decides, the held-out day is only reported
    grid = {
        "ray-default": [SimpleNamespace(policy="ray-default", index=i, params={"k": i}) for i in range(2)],
        "ours": [SimpleNamespace(policy="ours", index=i, params={"k": i}) for i in range(2)],
    }

    def result(attainment, cost):
        return SimpleNamespace(
            slo_attainment=attainment, cost_per_completed_request_usd=cost, replica_hours=1.0,
            peak_replicas=1, mean_replicas=1.0, num_requests=100, num_failed=0,
        )  # fmt: skip

    tuning = {("ray-default", 0): result(0.99, 4.0), ("ray-default", 1): result(0.95, 2.0),
              ("ours", 0): result(0.99, 3.0), ("ours", 1): result(0.97, 1.0)}  # fmt: skip
    held = {("ray-default", 0): result(0.98, 4.4), ("ray-default", 1): result(0.96, 2.2),
            ("ours", 0): result(0.992, 3.3), ("ours", 1): result(0.94, 1.1)}  # fmt: skip
    held_runs = []

    def run_held(p):
        held_runs.append((p.policy, p.index))
        return held[(p.policy, p.index)]

    out = frontier.frontier(grid, lambda p: tuning[(p.policy, p.index)], run_held, targets=(0.95, 0.97, 0.99))
    by = {e["target"]: e for e in out["frontier"]}
    # 95%: ray [1] (2.0 < 4.0), ours [1] (1.0); 97%: ray [0] (only one >= 0.97), ours [1]; 99%: ray [0], ours [0]
    assert by[0.95]["policies"]["ray-default"]["index"] == 1
    assert by[0.97]["policies"]["ray-default"]["index"] == 0
    assert by[0.97]["policies"]["ours"]["index"] == 1
    assert by[0.99]["policies"]["ours"]["index"] == 0
    # ours [1] kept 97% on the tuning day but 94% held out: reported as missing the target
    assert by[0.97]["policies"]["ours"]["keeps_target_held_out"] is False
    assert by[0.99]["policies"]["ours"]["keeps_target_held_out"] is True
    # held-out cost reduction at 99%: 1 - 3.3 / 4.4 = 0.25; one day, so undecided
    assert abs(by[0.99]["goal"]["cost_reduction_held_out"] - 0.25) < 1e-12
    assert by[0.99]["goal"]["verdict"] == "undecided"
    # each chosen configuration runs once on the held-out day
    assert sorted(held_runs) == [("ours", 0), ("ours", 1), ("ray-default", 0), ("ray-default", 1)]


def test_rule_paired_interval_and_verdict():
    # reductions 0.3, 0.4, 0.5: mean 0.4, sd 0.1, half-width t(0.975, 2) 4.303 * 0.1 / sqrt(3) = 0.24844
    mean, lo, hi = frontier.paired_interval([0.3, 0.4, 0.5])
    assert abs(mean - 0.4) < 1e-12 and abs(lo - 0.15156) < 1e-5 and abs(hi - 0.64844) < 1e-5
    assert frontier.interval_verdict((0.4, lo, hi)) == "undecided"  # straddles 25%
    assert frontier.interval_verdict((0.4, 0.3, 0.5)) == "met"
    assert frontier.interval_verdict((0.1, 0.0, 0.2)) == "missed"
    assert frontier.paired_interval([0.3]) is None  # one day: no interval
    assert frontier.interval_verdict(None) == "undecided"


def test_rule_across_days_pairs_the_same_chosen_configurations():
    def receipt(seed, ours_cost, ray_cost, ray_index=0):
        pick = lambda i, c: {"index": i, "held_out": {"cost_per_completed_request_usd": c, "slo_attainment": 0.99}}
        entry = {"policies": {"ours": pick(1, ours_cost), "ray-default": pick(ray_index, ray_cost)}}
        return {"targets": [0.99], "held_out_seed": seed, "frontier": [entry]}

    # per day 1 - 0.6/1.0 = 0.4, 1 - 0.7/1.0 = 0.3, 1 - 0.5/1.0 = 0.5: the interval of the test above
    rows = frontier.across_held_out_days([receipt(1, 0.6, 1.0), receipt(2, 0.7, 1.0), receipt(3, 0.5, 1.0)])
    assert [round(r, 12) for r in rows[0]["reductions"]] == [0.4, 0.3, 0.5]
    assert rows[0]["held_out_seeds"] == [1, 2, 3] and rows[0]["verdict"] == "undecided"
    try:
        frontier.across_held_out_days([receipt(1, 0.6, 1.0), receipt(2, 0.6, 1.0, ray_index=3)])
    except ValueError as exc:
        assert "different configurations" in str(exc)
    else:
        raise AssertionError("receipts of different tuning choices were paired")
