"""End-to-end replay against a real local HTTP server that doubles for our own ingress."""

import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dspine_fake_server import FakeDSpineServer  # noqa: E402
from free_ports import free_port  # noqa: E402

from ray_dspine.bench.client import ClientSettings, StreamingClient  # noqa: E402
from ray_dspine.bench.records import read_records  # noqa: E402
from ray_dspine.bench.replay import ReplayConfig, ReplaySink, replay  # noqa: E402
from ray_dspine.bench.replay_cli import main  # noqa: E402
from ray_dspine.bench.replay_run import ReplayOptions, UnknownPools, run_replay  # noqa: E402
from ray_dspine.bench.traces.loader import load_trace  # noqa: E402

CONVERSATIONS = [
    {"session_id": "s-dspine-1", "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi there friend"}, {"role": "user", "content": "next"},
        {"role": "assistant", "content": "ok"}]},
    {"session_id": "s-dflash-2", "messages": [
        {"role": "user", "content": "question"}, {"role": "assistant", "content": "answer text here"}]},
    {"session_id": "s-dspine-3", "messages": [
        {"role": "user", "content": "FAIL429 please"}, {"role": "assistant", "content": "x"}]},
    {"session_id": "s-dflash-4", "messages": [
        {"role": "user", "content": "CUTOFF now"}, {"role": "assistant", "content": "y" * 40}]},
]


@pytest.fixture
def server():
    fake = FakeDSpineServer().start()
    yield fake
    fake.stop()


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "conversations.jsonl"
    path.write_text("\n".join(json.dumps(c) for c in CONVERSATIONS))
    return path


def test_rule_closed_loop_warmup_and_failures_are_recorded(server, trace_file, tmp_path, monkeypatch):
    monkeypatch.setenv("DSPINE_API_KEY", "secret-key")
    out = tmp_path / "run"
    options = ReplayOptions(endpoint=server.url, trace=str(trace_file), out_dir=out, concurrency=2, warmup=1,
                            num_resamples=100)
    outcome = run_replay(options, command_line=["test"])
    records = read_records(out / "records.jsonl")
    assert len(records) == 5  # 2 + 1 + 1 + 1 assistant turns; the warm-up is not among them
    by_id = {r.trace_request_id: r for r in records}
    failed = by_id["s-dspine-3-t000"]
    assert (failed.error_kind, failed.http_status) == ("http_error", 429)
    assert "too many requests" in failed.error
    cut = by_id["s-dflash-4-t000"]
    assert cut.error_kind == "stream_cut" and cut.chunk_tokens == [2, 2] and cut.ttft_s is not None
    ok = by_id["s-dspine-1-t001"]
    # max_tokens = ceil(len("ok") / 4) = 1 -> one 1-token chunk; "hi there friend" (15 chars) -> 4 tokens.
    assert (ok.output_tokens, ok.finish_reason, ok.accept_length, ok.accept_histogram) == (1, "length", 1.0, [1, 0])
    first = by_id["s-dspine-1-t000"]
    assert (first.output_tokens, first.chunk_tokens, first.verify_steps) == (4, [2, 2], 2)
    assert len(first.itl_s) == 1 and first.ttft_s > 0 and first.e2e_s >= first.ttft_s
    assert (first.arm, first.pool, first.replica, first.path) == ("dspine", "agent-xhigh", "replica-0", "speculative")
    # the fake's Server-Timing: replica 20.0 ms, ingress 25.0 ms
    assert (first.server_replica_s, first.server_ingress_s) == (0.02, 0.025)
    assert (failed.server_replica_s, failed.server_ingress_s) == (None, None)  # a 429 tells none
    assert by_id["s-dflash-2-t000"].arm == "dflash2"
    # Turns of one conversation are sequential and carry the conversation's session header.
    posts = [p for p in server.received if p["headers"]["x-session-id"] == "s-dspine-1"]
    assert [len(p["body"]["messages"]) for p in posts] == [2, 4]
    assert all(p["headers"]["authorization"] == "Bearer secret-key" for p in server.received)
    warmups = [p for p in server.received if p["headers"]["x-session-id"].startswith("warmup-")]
    assert len(warmups) == 1 and len(server.received) == 6
    assert server.max_in_flight <= 2  # --concurrency 2: at most two conversations in flight

    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"]["errors_by_kind"] == {"http_429": 1, "stream_cut": 1}
    # The 429 carries no arm header, so it is grouped under "(none)" and left out of the comparison.
    assert summary["overall"]["num_ok"] == 3 and set(summary["by_arm"]) == {"dspine", "dflash2", "(none)"}
    # every ok answer carried the fake's Server-Timing (replica 20 ms), so TTFT splits for all three
    in_replica = summary["overall"]["ttft_in_replica_s"]
    assert in_replica["count"] == 3 and in_replica["mean"] == pytest.approx(0.02)
    assert summary["overall"]["ttft_outside_replica_s"]["count"] == 3
    assert summary["baseline_arm"] == "dflash2" and {r["arm"] for r in summary["arm_ratios"]} == {"dspine"}
    assert summary["overall"]["output_tokens"] == 4 + 1 + 4  # "answer text here" = 16 chars -> 4 tokens
    assert summary["arm_ratios"] and summary["overall"]["output_throughput_tok_s"] > 0
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["engine"]["agent-xhigh"]["draft_sha256"] == "1" * 64
    assert receipt["trace"]["num_requests"] == 5 and len(receipt["trace"]["sha256"]) == 64
    assert receipt["model"] == "fake-qwen" and receipt["settings"]["api_key_set"] is True
    assert "secret-key" not in (out / "receipt.json").read_text()
    assert receipt["command_line"] == ["test"] and receipt["warmup_requests"] == 1
    assert set(receipt["outputs_sha256"]) >= {"records.jsonl", "summary.json", "ttft_cdf.png"}
    pngs = sorted(p.name for p in (out / "plots").iterdir())
    assert pngs == ["accept_histogram.png", "e2e_cdf.png", "itl_cdf.png", "throughput_over_time.png", "ttft_cdf.png"]
    assert all((out / "plots" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert not outcome.interrupted


def test_rule_repetitions_timeout_and_pool_header(server, tmp_path):
    path = tmp_path / "slow.jsonl"
    path.write_text(json.dumps({"session_id": "s1", "messages": [
        {"role": "user", "content": "SLOW"}, {"role": "assistant", "content": "abcd"}]}))
    options = ReplayOptions(endpoint=server.url, trace=str(path), out_dir=tmp_path / "o", timeout_s=0.1,
                            pool="code-low", repetitions=2, plots=False, num_resamples=10)
    outcome = run_replay(options, command_line=[])
    records = read_records(tmp_path / "o" / "records.jsonl")
    assert [(r.repetition, r.error_kind) for r in records] == [(0, "timeout"), (1, "timeout")]
    deadline = time.monotonic() + 5.0  # the server may log the second request after the client gave up
    while len(server.received) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [p["headers"]["x-session-id"] for p in server.received] == ["s1", "s1-r1"]
    assert {p["headers"]["x-dspine-pool"] for p in server.received} == {"code-low"}
    assert len(outcome.summary.repetition_wall_s) == 2


def test_rule_each_pool_replays_every_conversation_on_every_pool(server, trace_file, tmp_path):
    # Two conversations (2 turns + 1 turn) on two pools, one conversation in flight per pool: a warm-up
    # per pool, then 3 turns per pool, each pool's copy under its own session ids; answers pair up by
    # trace request id, so the summary compares the pools turn by turn.
    options = ReplayOptions(endpoint=server.url, trace=str(trace_file), out_dir=tmp_path / "e", concurrency=1,
                            each_pool=["agent-xhigh", "code-low"], max_conversations=2, warmup=1,
                            baseline_arm="code-low", plots=False, num_resamples=50)
    outcome = run_replay(options, command_line=[])
    warmups = [p for p in server.received if p["headers"]["x-session-id"].startswith("warmup-")]
    assert sorted(p["headers"]["x-dspine-pool"] for p in warmups) == ["agent-xhigh", "code-low"]
    measured = [p for p in server.received if p not in warmups]
    sessions = sorted((p["headers"]["x-dspine-pool"], p["headers"]["x-session-id"]) for p in measured)
    assert sessions == [
        ("agent-xhigh", "s-dflash-2@agent-xhigh"), ("agent-xhigh", "s-dspine-1@agent-xhigh"),
        ("agent-xhigh", "s-dspine-1@agent-xhigh"), ("code-low", "s-dflash-2@code-low"),
        ("code-low", "s-dspine-1@code-low"), ("code-low", "s-dspine-1@code-low"),
    ]  # fmt: skip
    assert server.max_in_flight <= 2  # one conversation in flight on each pool
    records = read_records(tmp_path / "e" / "records.jsonl")
    assert len({r.request_id for r in records}) == 6
    assert sorted((r.arm, r.trace_request_id) for r in records) == sorted(
        (arm, tid) for arm in ("agent-xhigh", "code-low") for tid in ("s-dspine-1-t000", "s-dspine-1-t001", "s-dflash-2-t000")
    )
    paired = [p for p in outcome.summary.paired_ratios if p.metric == "ttft_s"]
    assert {(p.arm, p.baseline_arm, p.stat, p.num_pairs, p.num_clusters) for p in paired} == {
        ("agent-xhigh", "code-low", "p50", 3, 2), ("agent-xhigh", "code-low", "mean", 3, 2)
    }


def test_each_pool_refuses_a_pool_the_endpoint_does_not_serve(server, trace_file, tmp_path):
    options = ReplayOptions(endpoint=server.url, trace=str(trace_file), out_dir=tmp_path / "u",
                            each_pool=["agent-xhigh", "nope"], plots=False)
    with pytest.raises(UnknownPools, match="no pool named nope; its pools: agent-xhigh, code-low"):
        run_replay(options, command_line=[])
    assert server.received == []  # nothing was sent


def test_rule_open_loop_follows_scaled_arrivals(server, tmp_path):
    path = tmp_path / "timed.jsonl"
    rows = [{"session_id": f"s{i}", "arrival_s": a, "messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "abcd"}]} for i, a in enumerate([0, 2, 4])]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    trace = load_trace(str(path))
    sink = ReplaySink()

    async def go():
        async with httpx.AsyncClient() as http:
            client = StreamingClient(http, ClientSettings(endpoint=server.url, model="m"))
            await replay(trace.requests, ReplayConfig(mode="open", time_scale=0.05), client, sink)

    asyncio.run(go())
    starts = sorted(r.start_offset_s for r in sink.records)
    # Arrivals 0, 2, 4 s scaled by 0.05 -> sent at 0, 0.1, 0.2 s.
    assert starts == pytest.approx([0.0, 0.1, 0.2], abs=0.05)


def test_rule_cancel_keeps_what_was_measured(tmp_path):
    fake = FakeDSpineServer(chunk_delay_s=0.3).start()
    try:
        path = tmp_path / "c.jsonl"
        path.write_text("\n".join(json.dumps({"session_id": f"s{i}", "messages": [
            {"role": "user", "content": "q"}, {"role": "assistant", "content": "a" * 24}]}) for i in range(3)))
        trace = load_trace(str(path))
        sink = ReplaySink()

        async def go():
            async with httpx.AsyncClient() as http:
                client = StreamingClient(http, ClientSettings(endpoint=fake.url, model="m"))
                task = asyncio.create_task(replay(trace.requests, ReplayConfig(concurrency=3), client, sink))
                while len(fake.received) < 3:  # all three in flight; none can finish before 0.9 s
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

        asyncio.run(go())
        assert sink.interrupted and len(sink.records) == 3
        assert {r.error_kind for r in sink.records} == {"cancelled"}
        assert all(r.e2e_s < 0.9 for r in sink.records) and len(sink.repetition_wall_s) == 1
    finally:
        fake.stop()


def test_rule_open_loop_max_in_flight_and_incomplete_stream(server, tmp_path):
    path = tmp_path / "burst.jsonl"
    rows = [{"session_id": f"s{i}", "messages": [{"role": "user", "content": "NODONE" if i == 2 else "q"},
                                                 {"role": "assistant", "content": "abcdefgh"}]} for i in range(3)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    trace = load_trace(str(path))  # no times: all three arrive at 0 s
    sink = ReplaySink()

    async def go():
        async with httpx.AsyncClient() as http:
            client = StreamingClient(http, ClientSettings(endpoint=server.url, model="m"))
            await replay(trace.requests, ReplayConfig(mode="open", max_in_flight=1), client, sink)

    asyncio.run(go())
    spans = sorted((r.start_offset_s, r.start_offset_s + r.e2e_s) for r in sink.records)
    assert all(later[0] >= earlier[1] - 1e-3 for earlier, later in zip(spans, spans[1:]))  # one at a time
    nodone = next(r for r in sink.records if r.session_id == "s2")
    assert (nodone.error_kind, nodone.output_tokens, nodone.chunk_tokens) == ("incomplete_stream", 2, [2])


def test_rule_plots_written_without_data(tmp_path):
    from ray_dspine.bench.plots import PLOT_FILES, write_plots

    paths = write_plots([], tmp_path / "plots")
    assert sorted(p.name for p in paths) == sorted(PLOT_FILES)
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


def test_cli_unreachable_endpoint_exits_1(trace_file, tmp_path, capsys):
    code = main(["replay", "--endpoint", f"http://127.0.0.1:{free_port()}", "--trace", str(trace_file),
                 "--out", str(tmp_path / "x"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 1 and "cannot reach" in err and "Traceback" not in err


def test_cli_out_that_cannot_be_a_folder_exits_2_before_any_request(trace_file, tmp_path, capsys):
    taken = tmp_path / "summary.txt"
    taken.write_text("a file already")
    unreachable = f"http://127.0.0.1:{free_port()}"  # refused only after the flags: exit 1 would mean it got that far
    for out, says in ((taken, f"argument --out: {taken} is a file; name a folder for the run's files"),
                      (taken / "run", f"argument --out: cannot create {taken / 'run'} (Not a directory)")):
        with pytest.raises(SystemExit) as exc:
            main(["replay", "--endpoint", unreachable, "--trace", str(trace_file), "--out", str(out), "--no-progress"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and says in err and "Traceback" not in err
    assert taken.read_text() == "a file already"


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--concurrency", "0"], "--concurrency"),
        (["--time-scale", "0.5"], "--time-scale"),
        (["--arrivals", "--time-scale", "-1"], "--time-scale"),
        (["--endpoint", "localhost:8000"], "--endpoint"),
        (["--trace", "no-such-trace"], "--trace"),
        (["--api", "completions"], "--api"),
        (["--concurrency", "2", "--arrivals"], "--arrivals"),
        (["--each-pool", "agent-xhigh"], "--each-pool"),
        (["--each-pool", "a,a"], "--each-pool"),
        (["--pool", "a", "--each-pool", "a,b"], "--each-pool"),
        (["--tools", "from-trace"], "--tools"),  # the trace records no call
        (["--tools", "from-trace", "--api", "completions"], "--tools"),
    ],
)
def test_cli_bad_arguments_exit_2_naming_the_flag(argv, flag, trace_file, tmp_path, capsys):
    base = {"--trace": str(trace_file), "--out": str(tmp_path / "x")}
    for i, arg in enumerate(argv):
        if arg in base and i + 1 < len(argv):
            base.pop(arg)
    args = ["replay", *[x for kv in base.items() for x in kv], *argv]
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


def test_cli_json_and_after_write_hook(server, trace_file, tmp_path, capsys):
    from ray_dspine.bench import replay_cli

    seen = []
    replay_cli.AFTER_WRITE.append(lambda out_dir, args: seen.append((out_dir, args.max_requests)))
    try:
        code = main(["replay", "--endpoint", server.url, "--trace", str(trace_file), "--out", str(tmp_path / "j"),
                     "--max-requests", "2", "--no-plots", "--json", "--bootstrap-resamples", "20"])
    finally:
        replay_cli.AFTER_WRITE.clear()
    assert code == 0 and seen == [(tmp_path / "j", 2)]
    summary = json.loads(capsys.readouterr().out)
    assert summary["overall"]["num_requests"] == 2
