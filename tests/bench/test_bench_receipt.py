"""Receipt pieces: nvidia-smi parsing, git tolerance, versions without imports, and Ctrl-C."""

import json
import signal
import sys
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dspine_fake_server import FakeDSpineServer  # noqa: E402

from ray_dspine.bench.receipt import (  # noqa: E402
    cpu_name,
    distribution_versions,
    git_state,
    hardware,
    parse_nvidia_smi,
)
from ray_dspine.bench.replay_run import ReplayOptions, run_replay  # noqa: E402


def test_parse_nvidia_smi_csv():
    text = "name, memory.total [MiB], driver_version\nNVIDIA H200, 143771 MiB, 570.86.15\n"
    (gpu,) = parse_nvidia_smi(text)
    assert (gpu.name, gpu.memory_total, gpu.driver_version) == ("NVIDIA H200", "143771 MiB", "570.86.15")
    assert parse_nvidia_smi("name, memory.total [MiB], driver_version\n") == []


def test_cpu_name_is_the_model_name_and_the_usable_cores():
    cpuinfo = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: avx512f\n"
    assert cpu_name(cpuinfo, 2) == "Intel(R) Xeon(R) Processor, 2 cores"
    assert cpu_name("", 4).endswith(", 4 cores")  # no model name: the machine type stands in


def test_bench_engine_json_names_its_command_machine_and_commit(monkeypatch, capsys):
    import ray_dspine.bench.engine_bench as engine_bench
    from ray_dspine import cli

    monkeypatch.setattr(engine_bench, "run_engine_bench", lambda *args, **kwargs: {"spec_tokens_per_s": 1.0})
    monkeypatch.setattr(sys, "argv", ["/venv/bin/ray-dspine", "bench", "engine", "--agent-conversations", "0", "--json"])
    assert cli.main(sys.argv[1:]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["command_line"] == "ray-dspine bench engine --agent-conversations 0 --json"
    assert receipt["device_name"] == cpu_name() and set(receipt["git"]) == {"commit", "dirty", "note"}
    assert receipt["spec_tokens_per_s"] == 1.0


def test_git_state_tolerates_no_repository(tmp_path):
    state = git_state(tmp_path)
    assert state.commit is None and state.dirty is None and state.note


def test_versions_and_hardware_without_heavy_imports():
    before = set(sys.modules)
    versions = distribution_versions(["numpy", "surely-not-a-distribution-xyz"])
    assert versions["numpy"] and versions["surely-not-a-distribution-xyz"] is None and versions["python"]
    assert not {"torch", "ray", "sglang"} & (set(sys.modules) - before)
    hw = hardware()
    assert hw.num_cpus and hw.num_cpus >= 1
    assert hw.gpus or hw.gpu_note


class _CtrlCOnFourthPost(httpx.AsyncBaseTransport):
    """httpx's own HTTP transport, except that the fourth POST first raises SIGINT in the event loop's
    thread, as Ctrl-C at a terminal would: the replay stops at a known point, however busy the host."""

    def __init__(self) -> None:
        self._http = httpx.AsyncHTTPTransport()
        self.posts = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            self.posts += 1
            if self.posts == 4:
                signal.raise_signal(signal.SIGINT)
        return await self._http.handle_async_request(request)

    async def aclose(self) -> None:
        await self._http.aclose()


@pytest.fixture
def sigint_as_at_a_terminal():
    """Python's default SIGINT handler, which asyncio.run replaces with its own while it runs, as in a
    terminal's foreground process; a shell starts a background job (a CI runner's, say) with SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_still_writes_summary_and_receipt(tmp_path, sigint_as_at_a_terminal):
    fake = FakeDSpineServer(chunk_delay_s=0.2, engine_info=False).start()
    try:
        path = tmp_path / "c.jsonl"
        path.write_text("\n".join(json.dumps({"session_id": f"s{i}", "messages": [
            {"role": "user", "content": "q"}, {"role": "assistant", "content": "a" * 24}]}) for i in range(20)))
        options = ReplayOptions(endpoint=fake.url, trace=str(path), out_dir=tmp_path / "o", concurrency=2,
                                plots=False, num_resamples=10)
        # Two workers send one request each, then the next when theirs ends: the fourth POST goes out once
        # the first two have finished, and Ctrl-C comes with it; the fourth and any other in flight end cancelled.
        transport = _CtrlCOnFourthPost()
        outcome = run_replay(options, command_line=[], transport=transport)
    finally:
        fake.stop()
    assert outcome.interrupted
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    receipt = json.loads((tmp_path / "o" / "receipt.json").read_text())
    assert summary["interrupted"] and receipt["interrupted"] and receipt["engine"] is None
    kinds = [r["error_kind"] for r in map(json.loads, (tmp_path / "o" / "records.jsonl").read_text().splitlines())]
    # Finished requests are written as they end, the cancelled ones last; the run never reached 20.
    assert kinds.count(None) >= 2 and kinds.count(None) < 20 and kinds[-1] == "cancelled"
    assert kinds == sorted(kinds, key=lambda k: k is not None)
