"""A/B report on hand-made records: percentiles, throughput, acceptance, cost, bootstrap and verdict."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pytest

from ray_dspine.bench.ab_report import (
    PoolPrice,
    RunRecord,
    build_report,
    choose_baseline,
    conversation_means,
    interval,
    percentile,
)
from ray_dspine.bench.ab_report_cli import load_pool_prices, load_records, register_ab_report

REPO = Path(__file__).resolve().parents[2]
CONFIG = """
applications:
  - name: dspine
    args:
      pools:
        - name: spec
          gpu_hour_usd: 9.0
          deployment: {num_gpus: 1, num_replicas: 1}
        - name: ar
          gpu_hour_usd: 9.0
          deployment: {num_replicas: 1, ray_actor_options: {num_gpus: 2}}
        - name: unpriced
          deployment: {num_gpus: 1, num_replicas: 1}
"""


def _record(arm, pool, path, start, end, tokens, ttft, e2e, itl=(), accept=None, error=None, **extra):
    return {"arm": arm, "pool": pool, "path": path, "start_s": start, "end_s": end, "output_tokens": tokens,
            "prompt_tokens": 50, "ttft_s": ttft, "itl_s": list(itl), "e2e_s": e2e, "accept_length": accept,
            "accept_histogram": [], "error": error, "finish_reason": "stop", "workload": "agent", **extra}


def sequential_records() -> list[dict]:
    # speculative: t = 0..100 s; autoregressive: t = 200..400 s (one after the other).
    spec = [
        _record("speculative", "spec", "speculative", 0, 25, 100, 0.1, 1.0, [0.01, 0.02], 2.0),
        _record("speculative", "spec", "speculative", 10, 35, 200, 0.2, 2.0, [0.03], 3.0),
        _record("speculative", "spec", "speculative", 20, 45, 300, 0.3, 3.0, [0.04], 4.0),
        _record("speculative", "spec", "speculative", 30, 100, 400, 0.4, 4.0, [], 5.0),
        _record("speculative", "spec", "speculative", 50, 60, 0, None, None, error="HTTP 503"),
    ]
    ends = [250, 260, 270, 400]
    ar = [_record("autoregressive", "ar", "autoregressive", 200 + 10 * i, ends[i], 100, 0.097 + 0.1 * i,
                  2.0 * (i + 1), [], 1.0) for i in range(4)]
    return spec + ar


def _write_run(tmp_path: Path, records: list[dict]) -> Path:
    run = tmp_path / "run"
    run.mkdir(parents=True)
    lines = [json.dumps(r) for r in records] + ["", "{not json"]
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "pools.yaml").write_text(CONFIG)  # run.parent == tmp_path
    return run


def _report(tmp_path, records=None, config=True, **kwargs):
    run = _write_run(tmp_path, records or sequential_records())
    loaded, bad = load_records(run)
    prices = load_pool_prices(tmp_path / "pools.yaml") if config else None
    return build_report(loaded, prices=prices, rng=np.random.default_rng(0), source=str(run),
                        num_bad_lines=bad, **kwargs)


def test_rule_percentiles_linear_interpolation():
    # sorted [100, 200, 300, 400]: p50 at rank 1.5 -> 250; p95 at 2.85 -> 300 + 0.85*100 = 385; p99 at 2.97 -> 397
    values = [400, 100, 300, 200]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == pytest.approx((250, 385, 397))
    assert percentile([], 50) is None


def test_rule_per_arm_throughput_latency_acceptance(tmp_path):
    report = _report(tmp_path)
    spec, ar = {a.name: a for a in report.arms}["speculative"], {a.name: a for a in report.arms}["autoregressive"]
    assert (spec.num_requests, spec.num_completed, spec.num_failed) == (5, 4, 1)
    # 100 + 200 + 300 + 400 = 1000 tokens over the arm span 100 - 0 = 100 s -> 10 tok/s
    assert spec.span_s == 100 and spec.output_tok_per_s == pytest.approx(10.0)
    # autoregressive: 4 * 100 = 400 tokens over 400 - 200 = 200 s -> 2 tok/s
    assert ar.span_s == 200 and ar.output_tok_per_s == pytest.approx(2.0)
    # TTFT 100/200/300/400 ms -> p50 250, p95 385, p99 397
    assert (spec.ttft_ms.p50, spec.ttft_ms.p95, spec.ttft_ms.p99) == pytest.approx((250, 385, 397))
    # ITL gaps pooled: 10, 20, 30, 40 ms -> p50 25, p95 38.5
    assert (spec.itl_ms.p50, spec.itl_ms.p95) == pytest.approx((25, 38.5))
    # e2e 1, 2, 3, 4 s -> mean 2500 ms
    assert spec.e2e_ms.mean == pytest.approx(2500)
    # acceptance 2, 3, 4, 5: mean 3.5; p10 at rank 0.3 -> 2.3; p50 3.5; p90 at rank 2.7 -> 4.7
    acc = spec.acceptance
    assert (acc.mean, acc.p10, acc.p50, acc.p90) == pytest.approx((3.5, 2.3, 3.5, 4.7))
    assert spec.paths == {"speculative": 4}
    assert report.num_bad_lines == 1 and report.num_records == 9


def test_rule_cost_per_completed_request(tmp_path):
    report = _report(tmp_path)
    arms = {a.name: a for a in report.arms}
    # run span 400 - 0 = 400 s = 1/9 h.
    # spec: 9 USD/GPU-h * 1 GPU * 1 replica * 1/9 h = 1.0 USD over 4 completed -> 0.25
    # ar:   9 USD/GPU-h * 2 GPUs * 1 replica * 1/9 h = 2.0 USD over 4 completed -> 0.50
    assert report.run_span_s == 400
    assert arms["speculative"].cost_usd == pytest.approx(1.0)
    assert arms["speculative"].cost_per_completed_usd == pytest.approx(0.25)
    assert arms["autoregressive"].cost_per_completed_usd == pytest.approx(0.5)
    assert report.comparisons[0].cost_per_completed_ratio == pytest.approx(0.5)


def test_rule_cpu_pool_priced_per_replica_hour_and_unknown_costs():
    assert PoolPrice(name="cpu", gpu_hour_usd=0.1, num_gpus=0, num_replicas=3).usd_per_hour == pytest.approx(0.3)
    assert PoolPrice(name="x", gpu_hour_usd=None, num_gpus=1, num_replicas=1).usd_per_hour is None
    prices = load_pool_prices(REPO / "clusters" / "local.yaml")
    assert prices["spec"].usd_per_hour == pytest.approx(0.10)  # 0.10 per replica-hour, 1 replica, no GPU


def test_unpriced_pool_makes_cost_unknown(tmp_path):
    records = [_record("a", "unpriced", "speculative", i, i + 1, 10, 0.1, 1.0) for i in range(3)]
    records += [_record("b", "missing", "autoregressive", i, i + 1, 10, 0.1, 1.0) for i in range(3)]
    report = _report(tmp_path, records)
    notes = {a.name: a.cost_note for a in report.arms}
    assert notes == {"a": "cost unknown: pool 'unpriced' no gpu_hour_usd or num_replicas",
                     "b": "cost unknown: pool 'missing' not in the config"}
    assert "cost per completed request unknown" in report.verdict


def test_rule_verdict_line_sequential_arms(tmp_path):
    report = _report(tmp_path)
    assert report.baseline == "autoregressive"
    comparison = report.comparisons[0]
    assert comparison.speed_metric == "output throughput" and comparison.spans_overlap == 0
    low, high = comparison.speed_ratio_ci
    # Baseline tokens are constant (2 tok/s); candidate resamples give 4 * mean(tokens*) / 100 in [4, 16] tok/s,
    # so the ratio's CI lies within [2, 8] and excludes 1.
    assert 2.0 <= low <= 5.0 <= high <= 8.0
    # TTFT p50: 250 - 247 = +3 ms; TTFT p99: 397 - 394 = +3 ms, with its interval; e2e p50: 2500 - 5000 = -2500 ms
    assert re.fullmatch(
        r"speculative beats autoregressive: 5\.00x output throughput \[\d\.\d\d, \d\.\d\d\], "
        r"50% lower cost per completed request; TTFT p50 \+3 ms, TTFT p99 \+3 ms \[[-+]\d+, [-+]\d+\], "
        r"e2e p50 -2500 ms",
        report.verdict,
    ), report.verdict


def test_rule_verdict_no_significant_difference_when_interleaved(tmp_path):
    # Two arms with the same per-request rates, interleaved in time: the per-request output rate decides.
    records = []
    for i in range(20):
        tokens = 90 if i % 2 else 110
        records.append(_record("x", "spec", "speculative", i, i + 2.0, tokens, 0.1, 2.0))
        records.append(_record("y", "ar", "autoregressive", i + 0.5, i + 2.5, 200 - tokens, 0.1, 2.0))
    report = _report(tmp_path, records, config=False)
    comparison = report.comparisons[0]
    assert comparison.speed_metric == "per-request output rate"
    assert comparison.speed_ratio == pytest.approx(1.0)
    assert report.verdict.startswith(
        "no significant difference in per-request output rate between x and y: 1.00x [")
    # every TTFT is 100 ms in both arms: the p99 difference and each resample's are 0
    assert "cost per completed request unknown; TTFT p50 +0 ms, TTFT p99 +0 ms [+0, +0], e2e p50 +0 ms" \
        in report.verdict


def test_rule_grouping_by_arm_then_pool_and_baseline_choice(tmp_path):
    records = [_record(None, "spec", "speculative", 0, 1, 5, 0.1, 1.0),
               _record("", "ar", "autoregressive", 0, 1, 5, 0.1, 1.0)]
    report = _report(tmp_path, records, config=False)
    assert [a.name for a in report.arms] == ["ar", "spec"] and report.baseline == "ar"
    with pytest.raises(ValueError, match="not among the arms"):
        choose_baseline(report.arms, "nope")
    single = _report(tmp_path / "s", records[:1], config=False)
    assert single.verdict == "only one arm (spec): nothing to compare"


def test_rule_bootstrap_seeded_and_brackets_the_mean():
    values = [[1.0], [2.0], [3.0], [4.0], [10.0]]  # one value per conversation: the plain mean bootstrap
    first = interval(conversation_means(values, np.random.default_rng(7), 2000))
    again = interval(conversation_means(values, np.random.default_rng(7), 2000))
    assert first == again and first[0] < 4.0 < first[1]
    assert interval(conversation_means([[3.0]] * 5, np.random.default_rng(0), 500)) == (3.0, 3.0)
    assert conversation_means(values, np.random.default_rng(0), 1234).shape == (1234,)


def test_rule_an_arm_s_own_intervals_resample_whole_conversations(tmp_path):
    # Two conversations of 10 turns: TTFT 1 s in one, 3 s in the other. A resample draws two conversations:
    # its mean TTFT is 1, 2 or 3 s with probability 1/4, 1/2, 1/4, so the 95% interval is [1000, 3000] ms.
    # Drawn turn by turn (20 independent values) it would be far narrower around 2000 ms. The same for e2e
    # (2 s and 6 s), output throughput (10 and 30 tokens a turn over the arm's 100 s span: 2 or 4 or 6
    # tokens/s) and acceptance (1 and 3).
    records = [
        _record("a", "spec", "speculative", i, 100 if i == 0 else i + 1, 10 + 20 * c, 1.0 + 2 * c, 2.0 + 4 * c,
                accept=1.0 + 2 * c, session_id=f"s{c}", repetition=0)
        for c in (0, 1) for i in range(10)
    ]
    (arm,) = _report(tmp_path, records, config=False).arms
    assert arm.ttft_ms.mean == pytest.approx(2000.0) and arm.ttft_ms.mean_ci == pytest.approx((1000.0, 3000.0))
    assert arm.e2e_ms.mean_ci == pytest.approx((2000.0, 6000.0))
    assert arm.output_tok_per_s == pytest.approx(4.0) and arm.output_tok_per_s_ci == pytest.approx((2.0, 6.0))
    assert arm.acceptance.mean_ci == pytest.approx((1.0, 3.0))
    # without session ids every turn is its own conversation: the interval narrows around 2000 ms
    alone = _report(tmp_path / "alone", [{**r, "session_id": None} for r in records], config=False).arms[0]
    assert 1500.0 < alone.ttft_ms.mean_ci[0] < 2000.0 < alone.ttft_ms.mean_ci[1] < 2500.0


def test_tolerant_loader_accepts_replay_field_names():
    record = RunRecord.model_validate({"arm": "a", "start_unix_s": 5.0, "end_unix_s": 7.0, "new_field": 1,
                                       "error_kind": "timeout", "error": None})
    assert (record.start_s, record.end_s, record.ok) == (5.0, 7.0, False)


def test_a_line_without_a_send_time_is_not_a_record(tmp_path, capsys):
    run = _write_run(tmp_path, [{"a": 1}, _record("spec", "spec", "speculative", 0, 5, 10, 0.1, 1.0)])
    loaded, bad = load_records(run)
    assert [r.arm for r in loaded] == ["spec"] and bad == 2  # {"a": 1} and "{not json"
    (run / "records.jsonl").write_text('{"a": 1}\n')
    parser = argparse.ArgumentParser(prog="bench")
    register_ab_report(parser.add_subparsers())
    args = parser.parse_args(["ab-report", str(run)])
    assert args.func(args) == 2
    assert capsys.readouterr().err == f"error: argument DIR: no records in {run} (1 line is not a replay record)\n"


def test_cli_table_and_json(tmp_path, capsys):
    run = _write_run(tmp_path, sequential_records())
    parser = argparse.ArgumentParser(prog="bench")
    register_ab_report(parser.add_subparsers())
    args = parser.parse_args(["ab-report", str(run), "--config", str(tmp_path / "pools.yaml")])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "TTFT ms p50/p95/p99" in text and "250.0 / 385.0 / 397.0" in text
    assert "verdict: speculative beats autoregressive: 5.00x output throughput" in text
    assert re.search(r"mean prompt tokens +50 +50", text)  # every hand-made record has 50 prompt tokens
    # the arms share no turn: the report says its comparison is between different conversations
    assert "each arm answered its own conversations, so these comparisons are between different turns" in text
    args = parser.parse_args(["ab-report", str(run), "--json", "--resamples", "500", "--plot", str(tmp_path / "d.png")])
    assert args.func(args) == 0
    out = capsys.readouterr()
    payload = json.loads(out.out)
    assert payload["baseline"] == "autoregressive" and payload["num_resamples"] == 500
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG" and f"wrote {tmp_path / 'd.png'}" in out.err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["{missing}"], "argument DIR: cannot read"),
        (["{empty}"], "argument DIR: no records in"),
        (["{run}", "--resamples", "5"], "argument --resamples: must be from 100 to 100000 (got 5)"),
        (["{run}", "--baseline", "nope"], "argument --baseline: baseline arm 'nope' is not among the arms"),
        (["{run}", "--config", "{missing}"], "argument --config: cannot read pool prices"),
        (["{single}", "--plot", "{missing}/d.png"], "argument --plot: no latency differences to draw"),
        (["{run}", "--plot", "{missing}/d.png"], "argument --plot: cannot write"),
    ],
)
def test_cli_bad_input_names_the_argument_and_exits_2(tmp_path, capsys, flags, named):
    run = _write_run(tmp_path, sequential_records())
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "records.jsonl").write_text("")
    single = tmp_path / "single"
    single.mkdir()
    (single / "records.jsonl").write_text(json.dumps(sequential_records()[0]) + "\n")
    paths = {"run": str(run), "empty": str(empty), "missing": str(tmp_path / "no-such-run"), "single": str(single)}
    parser = argparse.ArgumentParser(prog="bench")
    register_ab_report(parser.add_subparsers())
    args = parser.parse_args(["ab-report", *(flag.format(**paths) for flag in flags)])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err and "Traceback" not in err


def test_rule_ttft_split_by_server_timing(tmp_path, capsys):
    # speculative answers tell the replica's share: TTFT 100/200/300/400 ms with 60/150/240/330 ms in the
    # replica -> outside 40/50/60/70 ms: p50 55, p95 68.5 (rank 2.85 -> 60 + 0.85 * 10); the failed one is
    # left out. Autoregressive answers tell none.
    records = sequential_records()
    for r, replica_s in zip(records[:5], (0.06, 0.15, 0.24, 0.33, 0.01)):
        r["server_replica_s"] = replica_s
    arms = {a.name: a for a in _report(tmp_path, records).arms}
    spec, ar = arms["speculative"], arms["autoregressive"]
    assert spec.ttft_outside_ms.num_values == 4
    assert (spec.ttft_outside_ms.p50, spec.ttft_outside_ms.p95) == pytest.approx((55, 68.5))
    assert spec.ttft_replica_ms.p50 == pytest.approx(195) and ar.ttft_outside_ms is None
    run = tmp_path / "run"
    parser = argparse.ArgumentParser(prog="bench")
    register_ab_report(parser.add_subparsers())
    args = parser.parse_args(["ab-report", str(run)])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.startswith("  outside it"))
    # columns: autoregressive (the baseline, untold) then speculative; p99 at rank 2.97 -> 69.7
    assert row.split()[2:] == ["-", "55.0", "/", "68.5", "/", "69.7"]


def test_no_split_rows_when_no_answer_told_the_replicas_share(tmp_path, capsys):
    run = _write_run(tmp_path, sequential_records())
    parser = argparse.ArgumentParser(prog="bench")
    register_ab_report(parser.add_subparsers())
    args = parser.parse_args(["ab-report", str(run)])
    assert args.func(args) == 0
    assert "in the replica" not in capsys.readouterr().out


def test_rule_percentile_deltas_per_comparison_and_table(tmp_path, capsys):
    # Both arms tell the replica's share. speculative TTFT 100/200/300/400 ms, replica 60/150/240/330 ms
    # (outside 40/50/60/70); autoregressive TTFT 97/197/297/397 ms, replica 90/180/270/360 ms (outside
    # 7/17/27/37). Outside p50: 55 - 22 = +33 ms; replica p50: 195 - 225 = -30 ms; e2e p50 2500 - 5000.
    records = sequential_records()
    for r, replica_s in zip(records, (0.06, 0.15, 0.24, 0.33, 0.01, 0.09, 0.18, 0.27, 0.36)):
        r["server_replica_s"] = replica_s
    comparison = _report(tmp_path, records).comparisons[0]
    got = {(d.metric, d.percentile): d for d in comparison.percentile_deltas}
    assert set(got) == {(m, p) for m in ("ttft_ms", "ttft_replica_ms", "ttft_outside_ms", "e2e_ms") for p in (50, 99)}
    assert got["ttft_ms", 50].delta == pytest.approx(3)
    assert got["ttft_outside_ms", 50].delta == pytest.approx(33)
    assert got["ttft_replica_ms", 50].delta == pytest.approx(-30)
    assert got["e2e_ms", 50].delta == pytest.approx(-2500)
    # e2e: candidate 1..4 s against 2..8 s; a resample's p99 lies in [1000, 4000] against [2000, 8000] ms
    low, high = got["e2e_ms", 99].delta_ci
    assert -7000 <= low <= high <= 2000
    parser = argparse.ArgumentParser(prog="bench")
    register_ab_report(parser.add_subparsers())
    args = parser.parse_args(["ab-report", str(tmp_path / "run")])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("speculative - autoregressive, ms [95% CI]"))
    assert lines[header].split()[-2:] == ["p50", "p99"]
    assert [line.split()[0] for line in lines[header + 1:header + 5]] == ["TTFT", "in", "outside", "e2e"]
    assert lines[header + 3].split()[2] == "+33.0"
    # four values per arm: each p99 sits between its arm's two largest, and the table says so
    assert lines[header + 5].startswith("  (an arm with 4 values: its p99 sits between its two largest")


def _same_turn_records(shared: bool) -> list[dict]:
    # Conversations s1 and s2, two turns each; no reuse: TTFT 2, 4 | 6, 8 s; reuse: exactly half on the
    # same turns. Every answer has 3 tokens after TTFT + 2 s, so TPOT is 1 s on both arms.
    rows = []
    for arm, scale in (("noreuse", 1.0), ("reuse", 0.5)):
        for i, (session, turn) in enumerate([("s1", 0), ("s1", 1), ("s2", 0), ("s2", 1)]):
            ttft = scale * 2.0 * (i + 1)
            trace_id = f"{session}-t{turn}" if shared else f"{arm}-{session}-t{turn}"
            rows.append(_record(arm, arm, "speculative", i, i + 5, 3, ttft, ttft + 2.0, [1.0, 1.0], 2.0,
                                trace_request_id=trace_id, session_id=f"{session}@{arm}", repetition=0))
    return rows


def test_rule_paired_same_turns(tmp_path, capsys):
    rng = np.random.default_rng(0)
    report = build_report([RunRecord.model_validate(r) for r in _same_turn_records(True)], prices=None, rng=rng,
                          num_resamples=200, baseline="noreuse")
    found = {(p.stat, p.metric): p for p in report.paired}
    ttft = found["p50", "ttft_s"]  # p50 2.5 s over p50 5 s; every resample keeps the pairs: no spread
    assert (ttft.arm, ttft.baseline_arm, ttft.num_pairs, ttft.num_clusters) == ("reuse", "noreuse", 4, 2)
    assert (ttft.ratio.estimate, ttft.ratio.low, ttft.ratio.high) == pytest.approx((0.5, 0.5, 0.5))
    assert found["mean", "tpot_s"].ratio.estimate == pytest.approx(1.0)  # (e2e - ttft) / 2 = 1 s on both
    run = _write_run(tmp_path, _same_turn_records(True))
    parser = argparse.ArgumentParser(prog="bench")
    register_ab_report(parser.add_subparsers())
    args = parser.parse_args(["ab-report", str(run), "--baseline", "noreuse", "--resamples", "200"])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "same turns on both arms:" in text and "each arm answered its own conversations" not in text
    assert "paired p50 ttft_s reuse/noreuse = 0.500 [0.500, 0.500] (95% CI, 4 turns of 2 conversations)" in text


def test_rule_paired_none_when_arms_share_no_turn():
    records = [RunRecord.model_validate(r) for r in _same_turn_records(False)]
    report = build_report(records, prices=None, rng=np.random.default_rng(0), num_resamples=200, baseline="noreuse")
    assert report.paired == [] and len(report.comparisons) == 1


def test_rule_comparison_intervals_resample_whole_conversations(tmp_path):
    # A sticky split of 4 conversations of 10 turns, interleaved in time, 10 output tokens per turn. The
    # baseline drew c1 (e2e 1 s: 10 tok/s per request) and c2 (e2e 3 s: 3.33 tok/s); the candidate drew c3
    # and c4 (e2e 2 s: 5 tok/s). Per-request rate means: 6.67 and 5, ratio 0.75. A resample of the
    # baseline's conversations has mean rate 10, 6.67 or 3.33 (probability 1/4, 1/2, 1/4), so the ratio's
    # interval is [5/10, 5/3.33] = [0.5, 1.5]: no significant difference. Drawn turn by turn, the 20
    # baseline rates would put it at about [0.62, 0.94], a verdict the draw of 4 conversations cannot carry.
    records = []
    for arm, sessions in (("y", {"c1": 1.0, "c2": 3.0}), ("x", {"c3": 2.0, "c4": 2.0})):
        for session, e2e in sessions.items():
            for t in range(10):
                records.append(_record(arm, arm, "speculative" if arm == "x" else "autoregressive", t, t + e2e,
                                       10, 0.1, e2e, session_id=session, trace_request_id=f"{session}-{t}"))
    report = _report(tmp_path, records, config=False)
    comparison = report.comparisons[0]
    assert (comparison.candidate, comparison.baseline) == ("x", "y")
    assert comparison.speed_metric == "per-request output rate"
    assert comparison.speed_ratio == pytest.approx(0.75)
    assert comparison.speed_ratio_ci == pytest.approx((0.5, 1.5))
    assert comparison.e2e_mean_ratio_ci == pytest.approx((2 / 3, 2.0))  # 2 s over mean e2e 1, 2 or 3 s
    # e2e p99: a draw of the baseline's conversations has p99 1000 ms (c1 twice, 1/4) or 3000 ms (3/4),
    # against 2000 ms: delta* is +1000 or -1000, so [-1000, +1000]; drawn turn by turn it would be -1000.
    p99 = next(d for d in comparison.percentile_deltas if (d.metric, d.percentile) == ("e2e_ms", 99))
    assert p99.delta_ci == pytest.approx((-1000.0, 1000.0))
    assert report.verdict.startswith("no significant difference in per-request output rate between x and y: 0.75x")


def test_rule_an_arm_without_completed_requests_is_listed_not_compared(tmp_path):
    refused = [_record(None, None, None, 5, 6, 0, None, None, error="HTTP 400: over the window") for _ in range(3)]
    report = _report(tmp_path, sequential_records() + refused, config=False)
    assert {a.name: a.num_failed for a in report.arms}["unknown"] == 3
    assert [c.candidate for c in report.comparisons] == ["speculative"]
    assert " | " not in report.verdict
