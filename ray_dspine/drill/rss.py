"""Resident memory (RSS) of the processes of the newest local Ray cluster, read from /proc.

Rules:
  process   one row per pid under /proc: its parent pid (field 4 of /proc/<pid>/stat, read after the last
            ")" so a command name holding ")" cannot shift it), its command line (NULs as spaces) and
            `VmRSS` from /proc/<pid>/status in kB. A process that ends while it is read is skipped.
  cluster   the newest Ray session is the greatest `session_YYYY-MM-DD_HH-MM-SS_<usec>_<pid>` named on any
            command line (the names sort by start time). The cluster's processes are those whose command
            line names that session, plus the drivers (`serve run`, `ray_dspine.local_cluster`), plus every
            descendant of those (workers are children of the raylet), found by repeated passes to a fixed point.
  total     the sum of the processes' RSS: shared pages count once per process, so it is an upper bound.
  growth    (total after - total before) / total before, in percent.
  peak      `--peak-over SECONDS`: a snapshot every `--every` seconds until SECONDS pass, the cluster stops,
            or SIGINT/SIGTERM arrives; the peak is the snapshot with the largest total (a peak of the sum,
            not a sum of each process's own peak), printed with its time and the number of samples.
Complexity: O(processes) per pass of the descendant search, at most O(depth) passes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

SESSION = re.compile(r"session_\d{4}-\d\d-\d\d_[\d-]+_\d+_\d+")
DRIVER_MARKERS = ("serve run", "ray_dspine.local_cluster")
COMMAND_CHARS = 120  # command lines are cut to this many characters in reports


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    command: str
    rss_bytes: int


class ProcessRss(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pid: int
    command: str = Field(description=f"Command line, first {COMMAND_CHARS} characters.")
    rss_bytes: int = Field(ge=0, description="VmRSS in bytes.")


class RssSnapshot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    session: str = Field(description="The Ray session the processes belong to.")
    processes: list[ProcessRss] = Field(description="One row per process, smallest RSS first.")

    @property
    def total_bytes(self) -> int:
        return sum(p.rss_bytes for p in self.processes)


def read_process(pid: int, proc_root: Path = Path("/proc")) -> ProcessInfo | None:
    """One process's parent, command line and RSS; None when it is gone or unreadable."""
    base = proc_root / str(pid)
    try:
        command = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        stat = (base / "stat").read_text()
        status = (base / "status").read_text()
    except OSError:
        return None
    match = re.search(r"VmRSS:\s+(\d+)\s*kB", status)
    fields = stat.rsplit(")", 1)[-1].split()
    if match is None or len(fields) < 2:
        return None  # kernel threads have no VmRSS
    return ProcessInfo(pid=pid, ppid=int(fields[1]), command=command, rss_bytes=int(match.group(1)) * 1024)


def read_processes(proc_root: Path = Path("/proc")) -> dict[int, ProcessInfo]:
    out = {}
    for name in os.listdir(proc_root):
        if name.isdigit():
            info = read_process(int(name), proc_root)
            if info is not None:
                out[info.pid] = info
    return out


def newest_session(processes: dict[int, ProcessInfo]) -> str | None:
    sessions = {m for p in processes.values() for m in SESSION.findall(p.command)}
    return max(sessions) if sessions else None


def cluster_pids(processes: dict[int, ProcessInfo], session: str) -> set[int]:
    """The session's processes, the drivers, and all their descendants (the `cluster` rule)."""
    chosen = {
        pid for pid, p in processes.items() if session in p.command or any(m in p.command for m in DRIVER_MARKERS)
    }
    grew = True
    while grew:
        grew = False
        for pid, p in processes.items():
            if p.ppid in chosen and pid not in chosen:
                chosen.add(pid)
                grew = True
    return chosen


def snapshot(proc_root: Path = Path("/proc")) -> RssSnapshot | None:
    """RSS of every process of the newest local Ray cluster; None when no Ray cluster runs here."""
    processes = read_processes(proc_root)
    session = newest_session(processes)
    if session is None:
        return None
    pids = sorted(cluster_pids(processes, session), key=lambda pid: (processes[pid].rss_bytes, pid))
    rows = [
        ProcessRss(pid=pid, command=processes[pid].command[:COMMAND_CHARS], rss_bytes=processes[pid].rss_bytes)
        for pid in pids
    ]
    return RssSnapshot(session=session, processes=rows)


def growth_percent(before: RssSnapshot, after: RssSnapshot) -> float:
    """The `growth` rule; 0 when nothing was resident before."""
    if before.total_bytes == 0:
        return 0.0
    return (after.total_bytes - before.total_bytes) / before.total_bytes * 100.0


def render(snap: RssSnapshot) -> str:
    lines = [f"{p.rss_bytes / 2**20:8.1f} MB  {p.command[:90]}" for p in snap.processes]
    lines.append(f"{snap.total_bytes / 2**20:8.1f} MB  total over {len(snap.processes)} processes ({snap.session})")
    return "\n".join(lines)


class Peak(BaseModel):
    """The `peak` rule's result."""

    model_config = ConfigDict(extra="forbid")

    at_s: float = Field(description="Seconds after the first sample at which the peak snapshot was taken.")
    num_samples: int = Field(ge=0)
    snapshot: RssSnapshot


def watch_peak(read, duration_s: float, every_s: float, clock=time.monotonic, sleep=time.sleep,
               stopped=lambda: False) -> Peak | None:
    """The `peak` rule over snapshots from `read()` (None: the cluster is gone, which ends the watch)."""
    start = clock()
    best: tuple[int, float, RssSnapshot] | None = None
    samples = 0
    while not stopped():
        taken = clock()
        snap = read()
        if snap is None:
            break
        samples += 1
        if best is None or snap.total_bytes > best[0]:
            best = (snap.total_bytes, taken - start, snap)
        if taken - start + every_s > duration_s:
            break
        sleep(max(0.0, taken + every_s - clock()))
    if best is None:
        return None
    return Peak(at_s=best[1], num_samples=samples, snapshot=best[2])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/stack-rss", description="RSS of the newest local Ray cluster.")
    parser.add_argument("--peak-over", type=float, metavar="SECONDS",
                        help="sample until SECONDS pass (or Ctrl-C / SIGTERM) and print the peak total")
    parser.add_argument("--every", type=float, default=1.0, metavar="SECONDS", help="seconds between samples")
    parser.add_argument("--json", metavar="FILE", help="also write the snapshot (or the peak) as JSON here")
    args = parser.parse_args(argv)
    if args.peak_over is not None and (args.peak_over <= 0 or args.every <= 0):
        parser.error("--peak-over and --every must be positive seconds")
    if args.peak_over is None:
        snap = snapshot()
        if snap is None:
            print("stack-rss: no Ray cluster is running", file=sys.stderr)
            return 1
        print(render(snap))
        if args.json:
            Path(args.json).write_text(snap.model_dump_json(indent=2) + "\n", encoding="utf-8")
        return 0
    stop = {"now": False}

    def on_signal(*_):
        stop["now"] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    def sleep(seconds: float) -> None:
        end = time.monotonic() + seconds
        while not stop["now"] and time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))

    peak = watch_peak(snapshot, args.peak_over, args.every, sleep=sleep, stopped=lambda: stop["now"])
    if peak is None:
        print("stack-rss: no Ray cluster is running", file=sys.stderr)
        return 1
    print(render(peak.snapshot))
    print(f"peak total {peak.snapshot.total_bytes / 2**20:.1f} MB at +{peak.at_s:.1f} s of {peak.num_samples} samples")
    if args.json:
        Path(args.json).write_text(json.dumps(peak.model_dump(), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
