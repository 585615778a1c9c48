"""rss.py: the test process's own RSS, and the choice of a cluster's processes on a hand-built /proc."""

import os
import re
from pathlib import Path

import pytest

from ray_dspine.drill.rss import (
    ProcessRss, RssSnapshot, cluster_pids, growth_percent, newest_session, read_process, read_processes, snapshot,
)

MIB = 2**20


def _vm_rss_bytes() -> int:
    return int(re.search(r"VmRSS:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) * 1024


def test_reads_this_process():
    me = read_process(os.getpid())
    assert me is not None and me.ppid == os.getppid()
    assert "pytest" in me.command
    assert abs(me.rss_bytes - _vm_rss_bytes()) < 16 * MIB  # read moments apart
    before = read_process(os.getpid()).rss_bytes
    block = bytearray(64 * MIB)  # zero-filled by the allocator: touch every page so it is resident
    for i in range(0, len(block), 4096):
        block[i] = 1
    grown = read_process(os.getpid()).rss_bytes - before
    assert grown >= 60 * MIB
    del block


def _proc(root: Path, pid: int, ppid: int, command: str, rss_kb: int | None = 1024) -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "cmdline").write_bytes(command.replace(" ", "\0").encode() + b"\0")
    (d / "stat").write_text(f"{pid} (odd) name) S {ppid} 1 1 0")
    (d / "status").write_text(f"Name:\tx\nVmRSS:\t{rss_kb} kB\n" if rss_kb is not None else "Name:\tkthread\n")


OLD = "session_2026-12-01_10-00-00_000001_11"
NEW = "session_2026-12-04_09-30-00_123456_22"


@pytest.fixture
def proc(tmp_path):
    _proc(tmp_path, 1, 0, "/sbin/init")
    _proc(tmp_path, 10, 1, f"gcs_server --session-dir=/tmp/ray/{OLD}")  # an older cluster: left out
    _proc(tmp_path, 20, 1, f"gcs_server --session-dir=/tmp/ray/{NEW}", 2048)
    _proc(tmp_path, 21, 1, f"raylet --session_dir=/tmp/ray/{NEW}", 4096)
    _proc(tmp_path, 30, 21, "ray::ServeReplica:dspine:pool-spec", 8192)  # child of the raylet
    _proc(tmp_path, 31, 30, "python worker-child", 512)  # grandchild
    _proc(tmp_path, 40, 1, "python -m ray_dspine.local_cluster clusters/local.yaml", 1024)  # the driver
    _proc(tmp_path, 50, 1, "bash unrelated")
    _proc(tmp_path, 60, 21, "kworker", None)  # no VmRSS: skipped
    return tmp_path


def test_rule_cluster_is_the_newest_session_with_drivers_and_descendants(proc):
    processes = read_processes(proc)
    assert 60 not in processes and processes[20].ppid == 1  # ")" in the name does not shift the fields
    assert newest_session(processes) == NEW
    assert cluster_pids(processes, NEW) == {20, 21, 30, 31, 40}
    snap = snapshot(proc)
    # 2048 + 4096 + 8192 + 512 + 1024 kB = 15,872 kB
    assert snap.session == NEW and snap.total_bytes == 15_872 * 1024
    assert [p.pid for p in snap.processes] == [31, 40, 20, 21, 30]  # smallest first


def test_no_cluster_gives_none(tmp_path):
    _proc(tmp_path, 1, 0, "/sbin/init")
    assert snapshot(tmp_path) is None


def test_rule_growth_percent():
    def snap(*mib):
        return RssSnapshot(session="s", processes=[ProcessRss(pid=i, command="p", rss_bytes=m * MIB)
                                                   for i, m in enumerate(mib)])
    assert growth_percent(snap(60, 40), snap(63, 42)) == pytest.approx(5.0)  # 100 -> 105 MiB
    assert growth_percent(snap(100), snap(90)) == pytest.approx(-10.0)
    assert growth_percent(snap(), snap(5)) == 0.0
