"""Supervise one SGLang server process: launch, wait for /health, watch for exits, restart, fall back.

Lifecycle: `start()` launches (with the drafter when it is wanted and not fallen back) and returns once
`/health` answers 200, or raises when the crash policy gives up. A background loop then waits for the
process to exit. An exit nobody asked for is a crash: `CrashPolicy` decides to restart (after a backoff),
to relaunch without the drafter (path "autoregressive"), or to give up (state "failed", unhealthy).
`set_drafter_enabled` relaunches with or without drafter flags after in-flight requests drain.

The server runs in its own process group (SGLang forks scheduler and detokenizer processes), so stopping
signals the whole group: SIGTERM, then SIGKILL after `stop_grace_s`. Its stdout and stderr go to
`<log_dir>/sglang-server.log`; the launch command is logged, request contents never are. The launcher,
the health probe, the clock and the sleep function are injected, so tests run a double instead of SGLang.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from pathlib import Path
from typing import Awaitable, Callable, Literal, Mapping, Protocol

from .args import redact
from .policy import CrashPolicy

log = logging.getLogger(__name__)

State = Literal["stopped", "starting", "ready", "backoff", "failed"]


class ServerProcess(Protocol):
    pid: int
    returncode: int | None

    async def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...


Launcher = Callable[[list[str], Mapping[str, str], Path], Awaitable[ServerProcess]]
HealthProbe = Callable[[str], Awaitable[bool]]


class _GroupProcess:
    """An asyncio subprocess whose signals go to its whole process group."""

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


async def launch_subprocess(command: list[str], env: Mapping[str, str], log_path: Path) -> ServerProcess:
    """Start `command` in a new session (own process group), output appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as sink:
        sink.write(f"=== launch: {' '.join(redact(command))}\n".encode())
        sink.flush()
        process = await asyncio.create_subprocess_exec(
            *command, env=dict(env), stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    return _GroupProcess(process)


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


class ServerSupervisor:
    def __init__(
        self,
        *,
        build_command: Callable[[bool, int], list[str]],
        env: Mapping[str, str],
        log_dir: Path,
        launcher: Launcher,
        probe: HealthProbe,
        policy: CrashPolicy,
        drafter_available: bool,
        startup_timeout_s: float,
        health_poll_s: float,
        stop_grace_s: float,
        drain_s: float,
        preferred_port: int | None = None,
        inflight: Callable[[], int] = lambda: 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        self._build_command, self._env, self._launcher, self._probe = build_command, env, launcher, probe
        self._policy, self._clock, self._sleep, self._inflight = policy, clock, sleep, inflight
        self._startup_timeout_s, self._health_poll_s = startup_timeout_s, health_poll_s
        self._stop_grace_s, self._drain_s, self._preferred_port = stop_grace_s, drain_s, preferred_port
        self.log_path = log_dir / "sglang-server.log"
        self.drafter_available = drafter_available
        self.drafter_enabled = drafter_available
        self.fallen_back = False
        self.fallback_reason: str | None = None
        self.state: State = "stopped"
        self.drafter_active = False
        self.command: list[str] = []
        self.base_url = ""
        self.num_launches = 0
        self.num_crashes = 0
        self.draining = False
        self._launch_drafter = False  # drafter setting of the current (or starting) launch
        self._process: ServerProcess | None = None
        self._loop_task: asyncio.Task | None = None
        self._settled = asyncio.Event()
        self._relaunch = asyncio.Event()
        self._stopping = False

    @property
    def path(self) -> Literal["speculative", "autoregressive"]:
        return "speculative" if self.drafter_active else "autoregressive"

    def _wants_drafter(self) -> bool:
        return self.drafter_available and self.drafter_enabled and not self.fallen_back

    async def start(self) -> None:
        self._stopping = False
        self._settled.clear()
        self._loop_task = asyncio.create_task(self._run(), name="sglang-supervisor")
        await self._settled.wait()
        if self.state == "failed":
            raise RuntimeError(f"the SGLang server did not come up after {self.num_crashes} crashes; see {self.log_path}")

    async def stop(self) -> None:
        self._stopping = True
        self._relaunch.set()
        if self._loop_task is not None:
            await self._loop_task
            self._loop_task = None
        self.state, self.drafter_active = "stopped", False

    def set_drafter_enabled(self, enabled: bool) -> None:
        """Operator switch: relaunch with (True) or without (False) the drafter; True also clears a fallback."""
        self.drafter_enabled = enabled
        if enabled and self.fallen_back:
            self.fallen_back, self.fallback_reason = False, None
            self._policy.reset()
        if self._loop_task is not None and self._launch_drafter != self._wants_drafter():
            self._relaunch.set()

    async def _run(self) -> None:
        while not self._stopping:
            drafter = self._launch_drafter = self._wants_drafter()
            self._relaunch.clear()
            if await self._launch(drafter):
                self.state, self.drafter_active = "ready", drafter
                self._settled.set()
                crashed = await self._watch()
                self.drafter_active = False
                if not crashed:
                    continue  # asked to relaunch (drafter switch) or to stop
            if self._stopping:
                break
            self.num_crashes += 1
            decision = self._policy.record(self._clock(), drafter)
            log.warning("SGLang server exited (crash %d, drafter %s): %s", self.num_crashes, drafter, decision.action)
            if decision.action == "give_up":
                self.state = "failed"
                self._settled.set()
                return
            if decision.action == "fallback":
                self.fallen_back = True
                self.fallback_reason = (
                    f"{decision.num_drafter_crashes} crashes with the drafter on within the crash window"
                )
            self.state = "backoff"
            await self._pause(decision.delay_s)
        await self._terminate()

    async def _pause(self, delay_s: float) -> None:
        if delay_s > 0:
            sleeper = asyncio.ensure_future(self._sleep(delay_s))
            woken = asyncio.ensure_future(self._relaunch.wait())
            await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
            sleeper.cancel()
            woken.cancel()

    async def _launch(self, drafter: bool) -> bool:
        port = pick_port(self._preferred_port)
        self.command = self._build_command(drafter, port)
        self.base_url = f"http://127.0.0.1:{port}"
        self.state = "starting"
        self.num_launches += 1
        log.info("launching SGLang server %d on port %d (drafter %s), log %s", self.num_launches, port, drafter,
                 self.log_path)
        process = await self._launcher(self.command, self._env, self.log_path)
        self._process = process
        deadline = self._clock() + self._startup_timeout_s
        exited = asyncio.ensure_future(process.wait())
        try:
            while not self._stopping:
                if exited.done():
                    return False
                if await self._probe(self.base_url):
                    return True
                if self._clock() > deadline:
                    log.error("SGLang server gave no healthy answer within %.0f s", self._startup_timeout_s)
                    await self._terminate()
                    return False
                await asyncio.wait({exited}, timeout=self._health_poll_s)
            return False
        finally:
            exited.cancel()

    async def _watch(self) -> bool:
        """Wait for an exit (True: a crash) or a relaunch request (False: stopped on purpose)."""
        assert self._process is not None
        exited = asyncio.ensure_future(self._process.wait())
        asked = asyncio.ensure_future(self._relaunch.wait())
        await asyncio.wait({exited, asked}, return_when=asyncio.FIRST_COMPLETED)
        asked.cancel()
        if exited.done():
            return True
        exited.cancel()
        self.draining = True  # the engine stops taking requests while in-flight ones finish
        try:
            if not self._stopping:
                await self._drain()
            await self._terminate()
        finally:
            self.draining = False
        return False

    async def _drain(self) -> None:
        deadline = self._clock() + self._drain_s
        while self._inflight() > 0 and self._clock() < deadline and not self._stopping:
            await self._sleep(0.05)

    async def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=self._stop_grace_s)
        except asyncio.TimeoutError:
            process.send_signal(signal.SIGKILL)
            await process.wait()
