"""Run the SGLang server in its own process group, and end the whole group, orphans included.

Rules:
  G1  launch     the server starts in a new session (`start_new_session`): its pid is the group id, and
                 every process it forks (SGLang's scheduler, detokenizer, TP workers) inherits the group.
  G2  signal     signals go to the group (`killpg`), also after the leader has exited: a scheduler whose
                 parent died keeps its GPU memory until it is signalled itself.
  G3  alive      the group is alive while a member is not yet a zombie (read from /proc/<pid>/stat: state
                 and pgrp; where /proc is missing, while `killpg(pgid, 0)` succeeds). Linux does not hand a
                 group id out as a new pid while the group has members, so the id cannot name a stranger.
  G4  terminate  SIGTERM to the group, wait up to `grace_s` for it to be gone, then SIGKILL and wait up to
                 `kill_wait_s` more; the leader is reaped by asyncio.
The /proc scan is O(processes on the node) and runs in a worker thread, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import Mapping, Protocol

from .args import redact

log = logging.getLogger(__name__)

GROUP_POLL_S = 0.05
KILL_WAIT_S = 10.0


class ServerProcess(Protocol):
    """A launched server. `send_signal` reaches its whole group; a process that also offers
    `async group_alive() -> bool` is waited for until its group is gone, otherwise until it exits."""

    pid: int
    returncode: int | None

    async def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...


def group_members(pgid: int, proc: Path = Path("/proc")) -> list[int]:
    """Pids of live (non-zombie) processes in group `pgid` (rule G3); blocking."""
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while we looked
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


class GroupProcess:
    """An asyncio subprocess that leads its own process group; signals go to the whole group."""

    def __init__(self, process: asyncio.subprocess.Process):
        self._process = process
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        return await self._process.wait()

    def send_signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    async def group_alive(self) -> bool:
        return bool(await asyncio.to_thread(group_members, self.pid))


async def launch_subprocess(command: list[str], env: Mapping[str, str], log_path: Path) -> ServerProcess:
    """Start `command` in a new session (rule G1), output appended to `log_path` after a launch line."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as sink:
        sink.write(f"=== launch: {' '.join(redact(command))}\n".encode())
        sink.flush()
        process = await asyncio.create_subprocess_exec(
            *command, env=dict(env), stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    return GroupProcess(process)


async def _alive(process: ServerProcess) -> bool:
    check = getattr(process, "group_alive", None)
    if check is None:
        return process.returncode is None
    return await check()


async def _gone_within(process: ServerProcess, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    try:
        await asyncio.wait_for(process.wait(), timeout=max(0.0, timeout_s))
    except asyncio.TimeoutError:
        return False
    while await _alive(process):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(GROUP_POLL_S)
    return True


async def terminate_group(process: ServerProcess, grace_s: float, kill_wait_s: float = KILL_WAIT_S) -> None:
    """Rule G4: end the leader and every member of its group, whether or not the leader already exited."""
    if not await _alive(process) and process.returncode is not None:
        return
    process.send_signal(signal.SIGTERM)
    if await _gone_within(process, grace_s):
        return
    log.warning("SGLang server group %d outlived SIGTERM by %.1f s; sending SIGKILL", process.pid, grace_s)
    process.send_signal(signal.SIGKILL)
    if not await _gone_within(process, kill_wait_s):
        log.error("SGLang server group %d is still alive %.1f s after SIGKILL", process.pid, kill_wait_s)


def pick_port(preferred: int | None, host: str = "127.0.0.1") -> int:
    """`preferred` when it can be bound on `host`, else a free port the OS picks."""
    for candidate in ([preferred] if preferred else []) + [0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, candidate))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise OSError(f"no free port on {host}")
