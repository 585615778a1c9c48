"""Summary figures on hand-made records."""

import pytest

from ray_dspine.bench.records import RequestRecord, read_records, write_records
from ray_dspine.bench.summary import summarize


def _record(rid, arm, ttft, e2e, out, accept=None, steps=None, hist=(), error=None, status=200, cls="agent"):
    return RequestRecord(
        request_id=rid, trace_request_id=rid, session_id=rid, turn_index=0, workload_class=cls, repetition=0,
        api="chat", arm=arm, http_status=status, prompt_tokens=100, trace_prompt_tokens=100, max_tokens=64,
        output_tokens=out, ttft_s=ttft, e2e_s=e2e, itl_s=[0.1] * max(0, out - 1) if arm == "autoregressive" else [],
        accept_length=accept, verify_steps=steps, accept_histogram=list(hist),
        error_kind="http_error" if error else None, error=error, start_offset_s=0.0, start_unix_s=0.0, end_unix_s=e2e,
    )


RECORDS = [
    _record("a1", "autoregressive", 0.1, 1.1, 11, 1.0, 11, [11]),  # tpot (1.1-0.1)/10 = 0.1
    _record("a2", "autoregressive", 0.3, 2.3, 21, 1.0, 21, [21], cls="chat"),  # tpot 2.0/20 = 0.1
    _record("d1", "dspine", 0.2, 0.7, 11, 2.75, 4, [0, 1, 3]),  # 2 + 3*3 = 11 tokens; tpot 0.5/10 = 0.05
    _record("d2", "dspine", 0.4, 1.4, 21, 3.0, 7, [0, 0, 7]),  # 3*7 = 21 tokens; tpot 1.0/20 = 0.05
    _record("d3", "dspine", None, 0.01, 0, error="HTTP 429: busy", status=429),
]


def test_rule_summary_overall_figures():
    s = summarize(RECORDS, wall_s=4.0, repetition_wall_s=[4.0], num_resamples=200)
    o = s.overall
    assert (o.num_requests, o.num_ok, o.num_errors, o.errors_by_kind) == (5, 4, 1, {"http_429": 1})
    assert o.output_tokens == 64  # 11 + 21 + 11 + 21
    assert o.output_throughput_tok_s == pytest.approx(16.0)  # 64 / 4
    assert o.request_throughput_req_s == pytest.approx(1.0)  # 4 ok / 4 s
    assert s.repetition_output_throughput_tok_s == [pytest.approx(16.0)]
    # TTFT sorted 0.1, 0.2, 0.3, 0.4: mean 0.25, p50 (h = 1.5) 0.25, p95 (h = 2.85) 0.385.
    assert (o.ttft_s.mean, o.ttft_s.p50, o.ttft_s.p95) == pytest.approx((0.25, 0.25, 0.385))
    assert o.tpot_s.mean == pytest.approx(0.075)  # (0.1 + 0.1 + 0.05 + 0.05) / 4
    assert o.itl_s.count == 30  # 10 + 20 chunk gaps, all from the autoregressive arm
    assert o.e2e_s.p50 == pytest.approx(1.25)  # sorted 0.7, 1.1, 1.4, 2.3 -> (1.1 + 1.4) / 2


def test_rule_summary_acceptance_per_arm_and_class():
    s = summarize(RECORDS, wall_s=4.0, num_resamples=200)
    d = s.by_arm["dspine"]
    assert (d.num_requests, d.num_ok, d.output_tokens) == (3, 2, 32)
    assert d.output_throughput_tok_s == pytest.approx(8.0)  # 32 / 4 s shared wall time
    a = d.acceptance
    # Lengths 2.75 and 3.0: p10 = 2.75 + 0.1 * 0.25 = 2.775, p50 = 2.875, p90 = 2.975.
    assert (a.p10, a.p50, a.p90, a.mean) == pytest.approx((2.775, 2.875, 2.975, 2.875))
    assert a.token_weighted == pytest.approx(32 / 11)  # 32 tokens / (4 + 7) verify steps
    assert a.histogram == [0, 1, 10]
    assert s.by_arm["autoregressive"].acceptance.histogram == [32]
    assert set(s.acceptance_by_arm_and_class["autoregressive"]) == {"agent", "chat"}
    assert s.acceptance_by_arm_and_class["dspine"]["agent"].p50 == pytest.approx(2.875)
    assert set(s.by_workload_class) == {"agent", "chat"}


def test_rule_summary_ratios_against_baseline():
    s = summarize(RECORDS, wall_s=4.0, num_resamples=200)
    assert s.baseline_arm == "autoregressive"  # named baseline wins over sorted order
    ratios = {r.metric: r.ratio for r in s.arm_ratios}
    # TPOT is constant inside each arm (0.1 vs 0.05), so the ratio and its CI are exactly 0.5.
    assert (ratios["tpot_s"].estimate, ratios["tpot_s"].low, ratios["tpot_s"].high) == pytest.approx((0.5, 0.5, 0.5))
    assert ratios["accept_length"].estimate == pytest.approx(2.875)  # 2.875 / 1.0
    assert ratios["e2e_s"].estimate == pytest.approx(1.05 / 1.7)  # (0.7+1.4)/2 over (1.1+2.3)/2
    assert ratios["e2e_s"].low <= ratios["e2e_s"].estimate <= ratios["e2e_s"].high
    assert s.overall.mean_ci["ttft_s"].estimate == pytest.approx(0.25)


def test_rule_summary_mean_intervals_resample_conversations():
    # Two conversations of 10 turns, TTFT 1 s in one and 3 s in the other: a resample's mean is 1, 2 or 3 s
    # (probability 1/4, 1/2, 1/4), so the interval is [1, 3]; turn by turn it would hug 2 s.
    turns = []
    for c, ttft in (("s0", 1.0), ("s1", 3.0)):
        for t in range(10):
            record = _record(f"{c}-{t}", "dspine", ttft, ttft + 1.0, 5)
            turns.append(record.model_copy(update={"session_id": c, "turn_index": t}))
    ci = summarize(turns, wall_s=10.0, num_resamples=2000).by_arm["dspine"].mean_ci["ttft_s"]
    assert (ci.estimate, ci.low, ci.high) == pytest.approx((2.0, 1.0, 3.0))


def test_single_arm_has_no_ratios_and_records_round_trip(tmp_path):
    s = summarize(RECORDS[:2], wall_s=0.0, num_resamples=10)
    assert s.arm_ratios == [] and s.baseline_arm is None
    assert s.overall.output_throughput_tok_s is None  # no wall time measured
    write_records(tmp_path / "r.jsonl", RECORDS)
    assert read_records(tmp_path / "r.jsonl") == RECORDS
    assert RECORDS[4].tpot_s is None and RECORDS[0].tpot_s == pytest.approx(0.1)


def test_rule_ttft_split_by_server_timing_over_the_answers_that_carry_it():
    # d1: TTFT 0.2 with 0.15 in the replica -> 0.05 outside; d2: 0.4 with 0.30 -> 0.10; a1, a2 carry no
    # header and the failed d3 is left out: in the replica mean 0.225, outside mean 0.075, 2 requests
    records = [r.model_copy() for r in RECORDS]
    by_id = {r.request_id: r for r in records}
    by_id["d1"].server_replica_s, by_id["d2"].server_replica_s, by_id["d3"].server_replica_s = 0.15, 0.30, 0.01
    o = summarize(records, wall_s=4.0, num_resamples=50).overall
    assert (o.ttft_in_replica_s.count, o.ttft_outside_replica_s.count) == (2, 2)
    assert o.ttft_in_replica_s.mean == pytest.approx(0.225) and o.ttft_outside_replica_s.mean == pytest.approx(0.075)
    assert o.ttft_outside_replica_s.max == pytest.approx(0.10) and o.ttft_s.count == 4
    untold = summarize(RECORDS, wall_s=4.0, num_resamples=50).overall
    assert untold.ttft_outside_replica_s.count == 0 and untold.ttft_outside_replica_s.mean is None


def test_rule_paired_ratios_compare_the_same_turns():
    # Two turns of one conversation and one of another, each answered on both pools ("full" is the
    # baseline); a third turn answered only by "full" is left out of the pairs. Reuse TTFTs are a quarter
    # of full's on every paired turn, so the p50 and mean ratios are exactly 0.25 with a [0.25, 0.25]
    # interval; 3 pairs from 2 conversations.
    def turn(tid, session, arm, ttft):
        r = _record(f"{tid}@{arm}", arm, ttft, ttft + 1.0, 11)
        return r.model_copy(update={"trace_request_id": tid, "session_id": session})

    records = [
        turn("c1-t0", "c1", "full", 4.0), turn("c1-t0", "c1", "reuse", 1.0),
        turn("c1-t1", "c1", "full", 8.0), turn("c1-t1", "c1", "reuse", 2.0),
        turn("c2-t0", "c2", "full", 2.0), turn("c2-t0", "c2", "reuse", 0.5),
        turn("c3-t0", "c3", "full", 9.0),
    ]  # fmt: skip
    s = summarize(records, wall_s=10.0, baseline_arm="full", num_resamples=100)
    ttft = {p.stat: p for p in s.paired_ratios if p.metric == "ttft_s"}
    assert set(ttft) == {"p50", "mean"}
    for paired in ttft.values():
        assert (paired.arm, paired.baseline_arm, paired.num_pairs, paired.num_clusters) == ("reuse", "full", 3, 2)
        assert (paired.ratio.estimate, paired.ratio.low, paired.ratio.high) == pytest.approx((0.25, 0.25, 0.25))
    assert {p.metric for p in s.paired_ratios} == {"ttft_s", "tpot_s", "e2e_s"}


def test_arms_without_shared_turns_have_no_paired_ratios():
    s = summarize(RECORDS, wall_s=4.0, num_resamples=50)  # each request answered by one arm only
    assert s.arm_ratios and s.paired_ratios == []


def _split_by_conversation():
    # A sticky split: the baseline drew conversations c1 (10 turns, e2e 1 s each) and c2 (10 turns, 3 s);
    # the arm drew c3 and c4 (10 turns each, 2 s). Prompts: 100 tokens per turn on both arms.
    records = []
    for arm, sessions in (("autoregressive", {"c1": 1.0, "c2": 3.0}), ("dspine", {"c3": 2.0, "c4": 2.0})):
        for session, e2e in sessions.items():
            for t in range(10):
                r = _record(f"{session}-t{t}", arm, 0.1, e2e, 11)
                records.append(r.model_copy(update={"session_id": session}))
    return records


def test_rule_arm_ratios_resample_whole_conversations():
    s = summarize(_split_by_conversation(), wall_s=10.0, num_resamples=2000)
    e2e = next(r.ratio for r in s.arm_ratios if r.metric == "e2e_s")
    # Baseline resamples draw 2 conversations: mean e2e 1, 2 or 3 (1/4, 1/2, 1/4), so 2 / mean is 2, 1 or
    # 2/3, and the 95% interval is [2/3, 2] around the estimate 2 / 2 = 1 (stats.py's worked example).
    assert e2e.estimate == pytest.approx(1.0)
    assert (e2e.low, e2e.high) == pytest.approx((2 / 3, 2.0))
    assert s.paired_ratios == []  # no turn was answered on both arms


def test_replay_printout_names_each_arms_prompts_and_that_split_ratios_compare_other_turns(tmp_path):
    from ray_dspine.bench.replay_cli import format_summary

    text = format_summary(summarize(_split_by_conversation(), wall_s=10.0, num_resamples=200), tmp_path)
    assert "arm autoregressive: 20 ok, 0 errors, 22.0 tok/s, mean prompt 100 tokens" in text  # 220 tokens / 10 s
    assert "e2e_s dspine/autoregressive = 1.000 [" in text and "CI over conversations)" in text
    assert "so these ratios compare different turns; --each-pool" in text
    paired = [
        _record(f"t{i}@{arm}", arm, 0.1, 1.0, 11).model_copy(update={"trace_request_id": f"t{i}", "session_id": "c1"})
        for i in range(3) for arm in ("autoregressive", "dspine")
    ]
    assert "compare different turns" not in format_summary(summarize(paired, wall_s=1.0, num_resamples=50), tmp_path)
