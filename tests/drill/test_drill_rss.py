"""rss.py: the test process's own RSS, and the choice of a cluster's processes on a hand-built /proc."""

import mmap
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
    # a fresh anonymous mapping, not the allocator's: after earlier tests freed memory, malloc can hand back pages
    # that are still resident, and RSS would not grow; touch every page so it is resident
    block = mmap.mmap(-1, 64 * MIB)
    for i in range(0, len(block), 4096):
        block[i] = 1
    grown = read_process(os.getpid()).rss_bytes - before
    assert grown >= 60 * MIB
    block.close()


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


def _snap(total_mib):
    return RssSnapshot(session="session_x", processes=[ProcessRss(pid=1, command="raylet",
                                                                  rss_bytes=int(total_mib * MIB))])


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_rule_peak_is_the_largest_total_over_the_samples():
    from ray_dspine.drill.rss import watch_peak

    clock = _Clock()
    totals = iter([100, 130, 120, 125])
    peak = watch_peak(lambda: _snap(next(totals)), duration_s=3.5, every_s=1.0, clock=clock, sleep=clock.sleep)
    # samples at t = 0, 1, 2, 3 (a fifth at t = 4 would pass 3.5 s): the largest total, 130 MiB, came at t = 1
    assert (peak.num_samples, peak.at_s, peak.snapshot.total_bytes) == (4, 1.0, 130 * MIB)


def test_rule_peak_ends_when_the_cluster_stops_or_is_asked_to():
    from ray_dspine.drill.rss import watch_peak

    clock = _Clock()
    answers = iter([_snap(100), _snap(90), None, _snap(500)])
    peak = watch_peak(lambda: next(answers), duration_s=60, every_s=1.0, clock=clock, sleep=clock.sleep)
    assert (peak.num_samples, peak.snapshot.total_bytes) == (2, 100 * MIB)  # the None ended it: 500 never read
    assert watch_peak(lambda: _snap(1), 60, 1.0, clock=clock, sleep=clock.sleep, stopped=lambda: True) is None
