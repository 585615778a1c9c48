"""Receipt pieces: nvidia-smi parsing, git tolerance, versions without imports, and Ctrl-C."""

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dspine_fake_server import FakeDSpineServer  # noqa: E402

from ray_dspine.bench.receipt import distribution_versions, git_state, hardware, parse_nvidia_smi  # noqa: E402
from ray_dspine.bench.replay_run import ReplayOptions, run_replay  # noqa: E402


def test_parse_nvidia_smi_csv():
    text = "name, memory.total [MiB], driver_version\nNVIDIA H200, 143771 MiB, 570.86.15\n"
    (gpu,) = parse_nvidia_smi(text)
    assert (gpu.name, gpu.memory_total, gpu.driver_version) == ("NVIDIA H200", "143771 MiB", "570.86.15")
    assert parse_nvidia_smi("name, memory.total [MiB], driver_version\n") == []


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


def test_ctrl_c_still_writes_summary_and_receipt(tmp_path):
    fake = FakeDSpineServer(chunk_delay_s=0.2, engine_info=False).start()
    try:
        path = tmp_path / "c.jsonl"
        path.write_text("\n".join(json.dumps({"session_id": f"s{i}", "messages": [
            {"role": "user", "content": "q"}, {"role": "assistant", "content": "a" * 24}]}) for i in range(20)))
        options = ReplayOptions(endpoint=fake.url, trace=str(path), out_dir=tmp_path / "o", concurrency=2,
                                plots=False, num_resamples=10)
        # Each request streams 6 tokens as 3 chunks 0.2 s apart (~0.6 s), two at a time; once the server
        # has seen 4 requests the first pair has finished and the second is in flight: SIGINT then. The
        # 16 requests after those (~5 s) leave a busy host's scheduler ample time to run the interrupter.
        def interrupt_after_four() -> None:
            while len(fake.received) < 4:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)

        thread = threading.Thread(target=interrupt_after_four, daemon=True)
        thread.start()
        outcome = run_replay(options, command_line=[])
        thread.join()
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
