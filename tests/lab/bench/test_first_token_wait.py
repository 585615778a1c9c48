"""First-token wait beside another prefill (bench/first_token_wait.py): a test per rule, values worked by hand."""

import json

import pytest

from dspine_lab.bench.first_token_wait import covered, main, paired_figures, pool_figures, shared_seconds
from ray_dspine.bench.records import RequestRecord, write_records


def record(arm: str, session: str, turn: int, start: float, ttft: float | None, *, pool: str | None = None,
           error: bool = False) -> RequestRecord:
    trace_id = f"{session}-t{turn}"
    return RequestRecord(
        request_id=f"{trace_id}@{arm}", trace_request_id=trace_id, session_id=session, turn_index=turn,
        workload_class="agent", repetition=0, api="chat", arm=arm, pool=pool if pool is not None else arm,
        prompt_tokens=100, trace_prompt_tokens=100, max_tokens=8, output_tokens=8, ttft_s=ttft,
        e2e_s=None if ttft is None else ttft + 1.0, start_offset_s=start, start_unix_s=start, end_unix_s=start + 5,
        error_kind="http_error" if error else None,
    )


def test_rule_shared_is_the_window_covered_by_the_union_of_the_others():
    assert covered((0, 2), [(1, 4), (5, 6)]) == 1.0
    assert covered((1, 4), [(0, 2), (5, 6)]) == 1.0
    assert covered((5, 6), [(0, 2), (1, 4)]) == 0.0
    # overlapping others count once: [1, 2] and [1.5, 3] cover [1, 3] of [0, 4]
    assert covered((0, 4), [(1, 2), (1.5, 3)]) == 2.0
    assert covered((1, 2), [(0, 4), (1.5, 3)]) == 1.0
    assert covered((1.5, 3), [(0, 4), (1, 2)]) == 1.5
    assert covered((0, 1), [(1, 2)]) == 0.0  # windows that only touch share nothing


def test_rule_window_counts_answered_records_of_the_same_pool_only():
    records = [
        record("a", "s1", 0, 0.0, 2.0),
        record("a", "s2", 0, 1.0, 3.0),  # [1, 4]: shares [1, 2] with the first
        record("b", "s1", 0, 0.5, 1.0),  # another pool: shares nothing with pool a's windows
        record("a", "s3", 0, 1.5, 0.5, error=True),  # failed: no window
        record("a", "s4", 0, 1.5, None),  # no first token: no window
    ]
    shared = shared_seconds(records)
    assert shared == {"s1-t0@a": 1.0, "s2-t0@a": 1.0, "s1-t0@b": 0.0}


def test_rule_pool_falls_back_to_the_arm_when_the_record_names_none():
    records = [record("a", "s1", 0, 0.0, 2.0, pool=""), record("a", "s2", 0, 1.0, 2.0, pool="")]
    assert shared_seconds(records) == {"s1-t0@a": 1.0, "s2-t0@a": 1.0}


def paired_records() -> list[RequestRecord]:
    # ar: four turns, no two windows overlapping. spec: the first turns of s1 and s2 overlap on [1, 1.5].
    return [
        record("ar", "s1", 0, 0.0, 1.0), record("ar", "s1", 1, 10.0, 2.0),
        record("ar", "s2", 0, 20.0, 1.0), record("ar", "s2", 1, 30.0, 2.0),
        record("spec", "s1", 0, 0.0, 1.5), record("spec", "s2", 0, 1.0, 1.5),
        record("spec", "s1", 1, 10.0, 2.2), record("spec", "s2", 1, 30.0, 2.2),
    ]


def test_rule_per_pool_sums_ttft_and_shared_seconds():
    records = paired_records()
    pools = pool_figures(records, shared_seconds(records))
    assert pools["ar"] == {"turns": 4, "ttft_s": 6.0, "shared_s": 0.0, "turns_shared": 0}
    assert pools["spec"]["turns"] == 4 and pools["spec"]["turns_shared"] == 2
    assert pools["spec"]["ttft_s"] == pytest.approx(7.4)
    assert pools["spec"]["shared_s"] == pytest.approx(1.0)


def test_rule_paired_ratios_on_all_turns_alone_turns_and_net_of_shared_seconds():
    records = paired_records()
    paired = paired_figures(records, shared_seconds(records), "spec", "ar")
    # all: (1.5 + 2.2 + 1.5 + 2.2) / 4 over (1 + 2 + 1 + 2) / 4 = 1.85 / 1.5; both conversations alike, so
    # every resample gives the same ratio
    every = paired["ttft_mean_ratio"]
    assert every["turns"] == 4
    assert every["estimate"] == pytest.approx(1.85 / 1.5)
    assert every["low"] == pytest.approx(1.85 / 1.5) and every["high"] == pytest.approx(1.85 / 1.5)
    # alone on both arms: the second turns only, 2.2 / 2 each
    alone = paired["ttft_mean_ratio_alone"]
    assert alone["turns"] == 2
    assert (alone["estimate"], alone["low"], alone["high"]) == pytest.approx((1.1, 1.1, 1.1))
    # net of shared seconds: spec's first turns wait 1.5 - 0.5 = 1.0: (1 + 2.2) / (1 + 2)
    assert paired["ttft_minus_shared_mean_ratio"]["estimate"] == pytest.approx(3.2 / 3.0)


def test_rule_paired_needs_turns_answered_on_both_arms():
    records = paired_records()
    with pytest.raises(ValueError, match="no turn was answered on both arm 'dflash'"):
        paired_figures(records, shared_seconds(records), "dflash", "ar")


def test_cli_prints_measured_figures_and_json(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    write_records(path, paired_records())
    assert main([str(path), "--arm", "spec", "--baseline-arm", "ar"]) == 0
    text = capsys.readouterr().out
    assert "pool spec: 4 turns, TTFT 7.4 s in all, 1.0 s of it beside another prefill (2 turns)" in text
    assert "turns alone on both arms: 1.100 (95% interval 1.100 to 1.100, 2 turns)" in text
    assert all("MEASURED" in line for line in text.splitlines() if not line.startswith("  "))
    assert main([str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["pools"]["ar"]["ttft_s"] == 6.0 and "paired" not in result
    assert result["command_line"] == f"python -m dspine_lab.bench.first_token_wait {path} --json"
    assert "device_name" not in result  # no replay receipt beside the records


def test_json_names_the_replay_s_machine_and_commit_from_its_receipt(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    write_records(path, paired_records())
    (tmp_path / "receipt.json").write_text(json.dumps({
        "git": {"commit": "abc", "dirty": False}, "command_line": ["ray-dspine", "bench", "replay"],
        "hardware": {"cpu_model": "Example CPU", "num_cpus": 2},
    }))
    assert main([str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["device_name"] == "Example CPU, 2 cores"
    assert result["replay_git"] == {"commit": "abc", "dirty": False}
    assert result["replay_command_line"] == ["ray-dspine", "bench", "replay"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--arm", "spec"], "--arm and --baseline-arm go together"),
        (["--arm", "x", "--baseline-arm", "ar"], "no turn was answered on both arm 'x'"),
    ],
)
def test_cli_bad_arms_exit_2_naming_the_fix(tmp_path, capsys, argv, message):
    path = tmp_path / "records.jsonl"
    write_records(path, paired_records())
    with pytest.raises(SystemExit) as exit_info:
        main([str(path), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_a_missing_or_foreign_file_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "none.jsonl")])
    assert exit_info.value.code == 2
    assert "no file" in capsys.readouterr().err
    foreign = tmp_path / "notes.md"
    foreign.write_text("# notes\n")
    with pytest.raises(SystemExit) as exit_info:
        main([str(foreign)])
    assert exit_info.value.code == 2
    assert "is not a replay's records.jsonl" in capsys.readouterr().err
