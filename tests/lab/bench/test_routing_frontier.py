"""`bench routing --virtual --sweep-tolerance`: one test per rule of routing_frontier.py, the plot, the CLI."""

import json

import pytest

from dspine_lab.bench import routing_frontier, routing_virtual_report
from dspine_lab.bench.routing_frontier import (
    format_sweep_table,
    guard_tolerance,
    on_frontier,
    parse_tolerances,
    run_tolerance_sweep,
    with_guard_tolerance,
)
from dspine_lab.bench.routing_frontier_plot import draw_tolerance_sweep
from dspine_lab.bench.routing_virtual import replay_virtual
from dspine_lab.bench.routing_workload import RoutingBenchSettings
from ray_dspine.bench.traces.model import TraceMessage, TraceRequest
from ray_dspine.routing.config import RouterConfig
from ray_dspine.cli_errors import CliError

# the linear H200 profile (every prompt token priced alike) keeps the hand arithmetic short
SETTINGS = RoutingBenchSettings(num_replicas=2, routers=["cache_aware", "headroom"], profile="h200-qwen3.8-27b")


def two_requests() -> list[TraceRequest]:
    # as in test_routing_virtual.py: 1,027 and 1,539 prompt tokens; the second shares the first's two
    # full 2,048-character blocks (1,024 tokens) and arrives long after the first ended
    texts = [("r0", "s0", 0.0, "a" * 4096), ("r1", "s1", 10.0, "a" * 4096 + "b" * 2048)]
    return [
        TraceRequest(request_id=rid, session_id=session, turn_index=0, arrival_s=arrival, workload_class="chat",
                     messages=[TraceMessage(role="user", content=text)], prompt_tokens=len(text) // 4,
                     recorded_prompt_tokens=len(text) // 4, max_tokens=16, source="test")
        for rid, session, arrival, text in texts
    ]  # fmt: skip


def quiet(_message: str) -> None:
    pass


# --- tolerances rule ---


def test_rule_tolerances_in_the_order_given_with_none_for_no_guard():
    assert parse_tolerances("8, 0,2.5,none") == [8.0, 0.0, 2.5, None]
    assert parse_tolerances("NONE") == [None]


@pytest.mark.parametrize(
    ("text", "why"),
    [("6,2,6", "'6' is given twice"), ("none,none", "'none' is given twice"), ("-1", "'-1' is not a tolerance"),
     ("x", "'x' is not a tolerance"), ("nan", "'nan' is not a tolerance"), ("inf", "'inf' is not a tolerance"),
     (" , ", "give at least one tolerance")],
)  # fmt: skip
def test_rule_bad_tolerances_are_refused_naming_the_flag(text, why):
    with pytest.raises(CliError) as err:
        parse_tolerances(text)
    assert str(err.value).startswith("argument --sweep-tolerance: ") and why in str(err.value)


# --- frontier rule ---


def test_rule_frontier_drops_points_another_beats_on_both_figures():
    points = [(8.10, 0.250), (8.13, 0.273), (8.20, 0.270), (8.90, 0.282), (None, 0.300), (8.90, 0.282), (9.0, 0.282)]
    # (8.20, 0.270) is beaten by (8.13, 0.273) on both; (9.0, 0.282) by (8.90, 0.282) on p99 at equal hit;
    # the two equal (8.90, 0.282) points do not beat each other; a point without a p99 is never on it
    assert on_frontier(points) == [True, True, False, True, False, True, False]


# --- replays rule ---


def test_rule_a_tolerance_sets_the_guard_and_none_leaves_it_out():
    config = RouterConfig()
    assert guard_tolerance(with_guard_tolerance(config, 2.5)) == 2.5
    assert with_guard_tolerance(config, 2.5).stage("ttft_guard").per_cached_s == 4.0  # the rest kept
    assert guard_tolerance(with_guard_tolerance(config, None)) is None
    assert [s.type for s in with_guard_tolerance(config, None).filters] == ["fits_memory"]
    # a config without the guard gets one with the default extension
    assert with_guard_tolerance(with_guard_tolerance(config, None), 1.0).stage("ttft_guard").cached_max_s == 12.0


def test_rule_ours_is_replayed_per_tolerance_and_seed_and_baselines_per_seed(monkeypatch):
    real = routing_frontier.replay_virtual
    calls = []

    def recording(requests, settings, policy, seed, floors, config=None, **options):
        calls.append((policy, seed, None if config is None else guard_tolerance(config)))
        return real(requests, settings, policy, seed, floors, config=config, **options)

    monkeypatch.setattr(routing_frontier, "replay_virtual", recording)
    monkeypatch.setattr(routing_virtual_report, "replay_virtual", recording)  # the baselines' replays
    result = run_tolerance_sweep(two_requests(), SETTINGS, [0, 1], [0.0, None, 6.0], quiet)
    assert sorted(c for c in calls if c[0] == "cache_aware") == [("cache_aware", 0, None), ("cache_aware", 1, None)]
    ours = [c for c in calls if c[0] == "headroom"]
    assert ours == [("headroom", s, t) for t in (0.0, None, 6.0) for s in (0, 1)]
    assert [p["ttft_tolerance_s"] for p in result["points"]] == [0.0, None, 6.0]
    assert [p["is_default"] for p in result["points"]] == [False, False, True]  # RouterConfig's default is 6 s


def test_rule_points_average_the_seeds_and_judge_the_goals_on_the_means():
    result = run_tolerance_sweep(two_requests(), SETTINGS, [0], [0.0, None], quiet)
    # Both requests run alone; the second goes to the replica holding its two blocks under every router:
    # with tolerance 0 the guard keeps only that replica (515 uncached tokens against 1,539 elsewhere),
    # without the guard the prefix and session scores choose it (test_routing_virtual.py), and cache_aware
    # matches 2 of its 3 blocks (> 0.3). So every replay gives p99 0.128658 s and hit 1024 / 2566.
    for point in result["points"]:
        assert point["ttft_p99_sim_s"] == pytest.approx(0.128658)
        assert point["prefix_hit_rate"] == pytest.approx(1024 / 2566)
        assert point["ttft_p99_reduction"]["cache_aware"] == pytest.approx(0.0, abs=1e-9)
        values = {g["name"]: g["value"] for g in point["goals"]}  # point estimates, no verdict
        assert values == pytest.approx({"ttft_p99_reduction_vs_cache_aware": 0.0,
                                        "prefix_hit_rate_minus_cache_aware": 0.0, "retractions": 0.0}, abs=1e-9)
        assert all("met" not in g for g in point["goals"])
        # one engine seed: one pair per goal, no interval, so every paired verdict is undecided
        assert [g["verdict"] for g in point["paired_goals"]] == ["undecided", "undecided"]
        assert point["all_goals_met"] is False
        assert point["on_frontier"] is True  # equal points do not beat each other
    assert result["baselines"]["cache_aware"]["prefix_hit_rate"] == pytest.approx(1024 / 2566)
    same = replay_virtual(two_requests(), SETTINGS, "headroom", 0, {})
    assert result["points"][1]["runs"][0]["requests_per_replica"] == same.requests_per_replica


def test_table_says_when_no_baseline_was_replayed():
    result = run_tolerance_sweep(two_requests(), SETTINGS.model_copy(update={"routers": ["headroom"]}), [0], [6.0], quiet)
    row = format_sweep_table(result).splitlines()[1]
    assert row.startswith("6 s*") and row.endswith("no baseline to pair with")


def test_sweep_needs_ours_among_the_routers():
    with pytest.raises(CliError, match="argument --routers: .* list headroom among the routers"):
        run_tolerance_sweep(two_requests(), SETTINGS.model_copy(update={"routers": ["cache_aware"]}), [0], [None], quiet)


# --- plot ---


def sweep_document(pow2_hit: float) -> dict:
    def figures(p99, hit):
        return {"ttft_p99_sim_s": p99, "prefix_hit_rate": hit, "e2e_p99_sim_s": 1.0}

    points = [
        {**figures(8.1, 0.25), "label": "0 s", "on_frontier": True, "is_default": False},
        {**figures(8.9, 0.282), "label": "none", "on_frontier": True, "is_default": True},
    ]
    return {
        "settings": {"trace": "mooncake", "seed": 0, "num_replicas": 4},
        "engine_seeds": [0],
        "baselines": {"pow2": figures(16.0, pow2_hit), "cache_aware": figures(9.5, 0.28)},
        "points": points,
    }


def legend_texts(figure) -> list[str]:
    return [t.get_text() for t in figure.axes[0].get_legend().get_texts()]


def test_plot_names_a_baseline_far_off_the_axes_instead_of_stretching_them():
    figure = draw_tolerance_sweep(sweep_document(pow2_hit=0.127))
    axes = figure.axes[0]
    # the span is ours' hits 0.25-0.282 with cache_aware's 0.28, p99 8.1-9.5 with the goal corner
    # min(0.85 * 9.5, 0.7 * 16.0) = 8.075: margins of 10% of each span
    assert axes.get_xlim() == pytest.approx((0.25 - 0.0032, 0.282 + 0.0032))
    assert axes.get_ylim() == pytest.approx((8.075 - 0.1425, 9.5 + 0.1425))
    assert "pow2 (off the axes): hit 0.127, p99 16.00 s" in legend_texts(figure)
    assert "cache_aware" in legend_texts(figure) and "p99 and hit targets (point estimates; verdicts: paired)" in legend_texts(figure)


def test_plot_draws_a_baseline_inside_the_axes_as_a_marker():
    document = sweep_document(pow2_hit=0.26)
    document["baselines"]["pow2"]["ttft_p99_sim_s"] = 9.0
    assert "pow2" in legend_texts(draw_tolerance_sweep(document))


# --- CLI ---


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--sweep-tolerance", "0,6"], "error: argument --sweep-tolerance: sweeps run in virtual time; add --virtual"),
     (["--virtual", "--routers", "headroom", "--plot", "x.png"],
      "error: argument --plot: without a sweep it draws the paired goals, which need headroom and pow2"),
     (["--virtual", "--sweep-tolerance", "0", "--plot", "/nonexistent-folder/x.png"],
      "error: argument --plot: folder '/nonexistent-folder' does not exist"),
     (["--virtual", "--sweep-tolerance", "0,-2"], "error: argument --sweep-tolerance: '-2' is not a tolerance")],
)  # fmt: skip
def test_cli_bad_sweep_flags_are_named(routing_cli, capsys, argv, message):
    assert routing_cli(argv) == 2
    assert capsys.readouterr().err.startswith(message)


def test_cli_sweep_prints_json_and_draws_the_png(routing_cli, mooncake_trace, capsys, tmp_path):
    png = tmp_path / "sweep.png"
    argv = ["--virtual", "--window-s", "120", "--session-fraction", "0.05", "--engine-seeds", "0",
            "--sweep-tolerance", "0,none", "--plot", str(png), "--json"]  # fmt: skip
    assert routing_cli(argv) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert result["sweep"] == "ttft_tolerance_s" and list(result["baselines"]) == ["pow2", "cache_aware"]
    assert [p["label"] for p in result["points"]] == ["0 s", "none"]
    assert out.err.count("[seed 0]") == 2 and out.err.count("[tolerance ") == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
