"""`bench routing --virtual --sweep-load`: one test per rule of routing_load_sweep.py, the table, the plot, the CLI."""

import json

import pytest

from dspine_lab.bench.routing_load_plot import draw_load_sweep
from dspine_lab.bench.routing_load_sweep import format_load_table, parse_loads, run_load_sweep, settings_at_load
from dspine_lab.bench.routing_virtual_report import run_virtual_bench
from dspine_lab.bench.routing_workload import RoutingBenchSettings
from ray_dspine.bench.traces.model import TraceMessage, TraceRequest
from ray_dspine.cli_errors import CliError

SETTINGS = RoutingBenchSettings(num_replicas=2, routers=["cache_aware", "headroom"])


def two_requests(arrival_scale: float) -> list[TraceRequest]:
    # as in test_routing_frontier.py: 1,027 and 1,539 prompt tokens, the second sharing the first's two
    # full blocks, 10 trace seconds apart (the slice rule's arrival(q) = a(q) * arrival_scale)
    texts = [("r0", "s0", 0.0, "a" * 4096), ("r1", "s1", 10.0, "a" * 4096 + "b" * 2048)]
    return [
        TraceRequest(request_id=rid, session_id=session, turn_index=0, arrival_s=arrival * arrival_scale,
                     workload_class="chat", messages=[TraceMessage(role="user", content=text)],
                     prompt_tokens=len(text) // 4, recorded_prompt_tokens=len(text) // 4, max_tokens=16,
                     source="test")
        for rid, session, arrival, text in texts
    ]  # fmt: skip


def load_requests(settings: RoutingBenchSettings) -> list[TraceRequest]:
    return two_requests(settings.arrival_scale)


def quiet(_message: str) -> None:
    pass


# --- loads rule ---


def test_rule_loads_in_the_order_given():
    assert parse_loads("1.25, 0.8,1") == [1.25, 0.8, 1.0]


@pytest.mark.parametrize(
    ("text", "why"),
    [("1,0.8,1", "'1' is given twice"), ("0", "'0' is not a load"), ("-1", "'-1' is not a load"),
     ("x", "'x' is not a load"), ("nan", "'nan' is not a load"), ("inf", "'inf' is not a load"),
     (" , ", "give at least one load")],
)  # fmt: skip
def test_rule_bad_loads_are_refused_naming_the_flag(text, why):
    with pytest.raises(CliError) as err:
        parse_loads(text)
    assert str(err.value).startswith("argument --sweep-load: ") and why in str(err.value)


def test_rule_load_m_divides_the_arrival_scale_by_m():
    assert settings_at_load(SETTINGS, 2.0).arrival_scale == pytest.approx(0.05)
    assert settings_at_load(SETTINGS, 0.5).arrival_scale == pytest.approx(0.2)
    assert settings_at_load(SETTINGS, 2.0).routers == SETTINGS.routers  # nothing else changes


def test_rule_a_load_whose_arrival_scale_leaves_its_range_is_the_flags_error():
    # 0.1 / 0.0005 = 200 > 100, the most arrival_scale allows; the least load is 0.1 / 100 = 0.001
    with pytest.raises(CliError, match=r"argument --sweep-load: load 0.0005 needs arrival_scale 0.1 / 0.0005 = 200, "
                                       r"outside \(0, 100\]; give loads of at least 0.001"):  # fmt: skip
        settings_at_load(SETTINGS, 0.0005)


# --- point rule ---


def test_rule_each_point_is_the_virtual_bench_at_that_load_with_its_rate():
    result = run_load_sweep([SETTINGS], [0, 1], [2.0, 1.0], load_requests, quiet)
    assert [p["load"] for p in result["points"]] == [2.0, 1.0]
    assert [p["is_default"] for p in result["points"]] == [False, True]
    # two requests 10 trace seconds apart: 1.0 simulated s at arrival_scale 0.1 (2 per s), 0.5 s at 0.05
    assert [p["arrival_scale"] for p in result["points"]] == pytest.approx([0.05, 0.1])
    assert [p["offered_rate_per_sim_s"] for p in result["points"]] == pytest.approx([4.0, 2.0])
    at_one = settings_at_load(SETTINGS, 1.0)
    direct = run_virtual_bench([(at_one, load_requests(at_one))], [0, 1], quiet)
    point = result["points"][1]
    assert point["routers"] == direct["routers"]
    assert point["paired_goals"] == direct["paired_goals"]
    assert point["ttft_floor_p99_sim_s"] == pytest.approx(direct["slices"][0]["ttft_floor_p99_sim_s"])
    # the floor has no queueing: the same at both loads
    assert result["points"][0]["ttft_floor_p99_sim_s"] == pytest.approx(point["ttft_floor_p99_sim_s"])


def test_rule_every_slice_is_replayed_at_every_load():
    seen = []

    def recording(settings):
        seen.append((settings.seed, round(settings.arrival_scale, 6)))
        return load_requests(settings)

    run_load_sweep([SETTINGS.model_copy(update={"seed": s}) for s in (3, 5)], [0], [1.0, 2.0], recording, quiet)
    assert seen == [(3, 0.1), (5, 0.1), (3, 0.05), (5, 0.05)]


def test_table_has_a_row_per_load_and_the_paired_goals_by_load():
    result = run_load_sweep([SETTINGS], [0, 1], [1.0, 2.0], load_requests, quiet)
    lines = format_load_table(result).splitlines()
    assert lines[0].split() == ["load", "req/s", "floor", "p99", "cache_aware", "p99", "headroom",
                                "hit", "cache_aware", "hit", "headroom"]  # fmt: skip
    assert lines[1].split()[:2] == ["1x*", "2.00"] and lines[2].split()[:2] == ["2x", "4.00"]
    assert any(line.startswith("load 2x: SIMULATED paired ttft_p99_reduction_vs_cache_aware: ") for line in lines)


# --- plot ---


def test_plot_draws_each_router_the_floor_and_ours_cut_labels():
    result = run_load_sweep([SETTINGS], [0, 1], [1.0, 2.0], load_requests, quiet)
    figure = draw_load_sweep(result)
    p99_axes, hit_axes = figure.axes
    labels = [t.get_text() for t in p99_axes.get_legend().get_texts()]
    assert labels[:3] == ["cache_aware", "headroom", "floor (no queueing, ideal cache)"]
    assert "labels: headroom's paired p99 cut vs cache_aware" in labels
    # one label per load on ours' line: the cut of equal p99s is 0%
    assert [t.get_text() for t in p99_axes.texts] == ["0%", "0%"]
    assert p99_axes.get_ylim()[0] == 0.0
    ours = next(line for line in hit_axes.get_lines() if line.get_label() == "headroom")
    assert list(ours.get_xdata()) == pytest.approx([2.0, 4.0])  # sorted by rate


# --- CLI ---


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--sweep-load", "1,2"], "error: argument --sweep-load: sweeps run in virtual time; add --virtual"),
     (["--virtual", "--sweep-load", "1", "--sweep-tolerance", "6"],
      "error: argument --sweep-load: sweep one thing at a time; drop --sweep-tolerance"),
     (["--virtual", "--sweep-load", "1,-2"], "error: argument --sweep-load: '-2' is not a load")],
)  # fmt: skip
def test_cli_bad_sweep_load_flags_are_named(routing_cli, capsys, argv, message):
    assert routing_cli(argv) == 2
    assert capsys.readouterr().err.startswith(message)


def test_cli_sweep_load_prints_json_and_draws_the_png(routing_cli, mooncake_trace, capsys, tmp_path):
    png = tmp_path / "load.png"
    argv = ["--virtual", "--window-s", "120", "--session-fraction", "0.05", "--engine-seeds", "0",
            "--routers", "cache_aware,headroom", "--sweep-load", "1,2", "--plot", str(png), "--json"]  # fmt: skip
    assert routing_cli(argv) == 0
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert result["sweep"] == "load" and [p["load"] for p in result["points"]] == [1.0, 2.0]
    first, second = result["points"]
    assert second["offered_rate_per_sim_s"] == pytest.approx(2 * first["offered_rate_per_sim_s"])
    assert out.err.count("[load 1x] [seed 0]") == 2 and out.err.count("[load 2x] [seed 0]") == 2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
