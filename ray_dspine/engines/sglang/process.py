"""Supervise one SGLang server process: launch, wait for /health, probe the drafter, watch, restart, fall back.

Lifecycle of a launch (with the drafter when it is wanted and not fallen back):
  S1  start-up   launch, then poll /health every health_poll_s. No 200 within startup_timeout_s is a crash
                 (start-up timeout). An exit before the first 200 is a CONFIG ERROR when startup_errors.py's
                 rules C1/C2 say so (argparse's `error:` line, or a refusal raised under
                 sglang/srt/arg_groups), otherwise a crash; so is a launch that cannot start the process.
  S2  config     a config error is final for these arguments: state "config_error" (unhealthy), the
                 SGLang line is kept for describe(), no restart and no fallback; only an operator
                 drafter switch that changes the command (or stop) relaunches.
  S3  probe      a drafter launch is probed once (supervision.py P1-P3) before it is ready: no speculation
                 -> relaunch at once without the drafter (fallen back, reason from the probe, not a
                 crash); no answer -> a crash with the drafter on.
  S4  ready      state "ready"; then /health_generate every health_check_interval_s with a deadline of
                 health_check_timeout_s; hang_after_misses consecutive misses are a hang: a crash.
  S5  crash      an exit nobody asked for, a start-up timeout, a hang or a silent probe: the whole process
                 group is ended (process_group.py G4) and CrashPolicy decides: restart after a backoff,
                 relaunch without the drafter (fallen back), or give up (state "failed", unhealthy).
  S6  path       "speculative" while a drafter launch is ready; "autoregressive-fallback" while a drafter
                 pool runs without its drafter because it fell back (the operator has not switched the
                 drafter off); "autoregressive" otherwise.
`set_drafter_enabled` relaunches with or without drafter flags after in-flight requests drain; switching
it on clears a fallback. The process group is also ended on stop and before every relaunch, so no orphan
keeps GPU memory. Output goes to `<log_dir>/sglang-server.log`; the launch command is logged, request
contents never are. The launcher, probes, clock and sleep are injected, so tests run doubles instead of SGLang.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Awaitable, Callable, Literal, Mapping

from .policy import CrashPolicy
from .process_group import ServerProcess, launch_subprocess, pick_port, terminate_group
from .startup_errors import ConfigError, classify_exit, read_log_tail, this_launch
from .supervision import ServedPath, SupervisionConfig, SupervisionStatus, SupervisorState

log = logging.getLogger(__name__)

__all__ = ["ServerSupervisor", "ServerProcess", "launch_subprocess", "pick_port"]

Launcher = Callable[[list[str], Mapping[str, str], Path], Awaitable[ServerProcess]]
HealthProbe = Callable[[str], Awaitable[bool]]  # /health at start-up
HealthCheck = Callable[[str, float], Awaitable[bool]]  # /health_generate with a deadline (s)
DrafterProbe = Callable[[str], Awaitable[str | None]]  # None: the drafter works; else the fallback reason
Started = Literal["healthy", "exited", "timeout", "stopped"]
Watched = Literal["exited", "hung", "asked"]
Probed = Literal["works", "broken", "silent", "asked"]


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
        health_check: HealthCheck | None = None,
        drafter_probe: DrafterProbe | None = None,
        supervision: SupervisionConfig | None = None,
    ):
        self._build_command, self._env, self._launcher, self._probe = build_command, env, launcher, probe
        self._policy, self._clock, self._sleep, self._inflight = policy, clock, sleep, inflight
        self._startup_timeout_s, self._health_poll_s = startup_timeout_s, health_poll_s
        self._stop_grace_s, self._drain_s, self._preferred_port = stop_grace_s, drain_s, preferred_port
        self._health_check, self._drafter_probe = health_check, drafter_probe
        self._settings = supervision or SupervisionConfig()
        self.log_path = log_dir / "sglang-server.log"
        self.drafter_available = drafter_available
        self.drafter_enabled = drafter_available
        self.fallen_back = False
        self.fallback_reason: str | None = None
        self.config_error: ConfigError | None = None
        self.state: SupervisorState = "stopped"
        self.drafter_active = False
        self.command: list[str] = []
        self.base_url = ""
        self.num_launches = self.num_crashes = self.num_hangs = self.num_probe_failures = 0
        self.last_failure: str | None = None
        self.draining = False
        self._launch_drafter = False  # drafter setting of the current (or starting) launch
        self._process: ServerProcess | None = None
        self._loop_task: asyncio.Task | None = None
        self._settled = asyncio.Event()
        self._relaunch = asyncio.Event()
        self._stopping = False

    @property
    def path(self) -> ServedPath:
        """Rule S6."""
        if self.drafter_active:
            return "speculative"
        return "autoregressive-fallback" if self.drafter_fallback else "autoregressive"

    @property
    def drafter_fallback(self) -> bool:
        return self.drafter_available and self.drafter_enabled and self.fallen_back

    def status(self) -> SupervisionStatus:
        return SupervisionStatus(
            state=self.state, path=self.path, drafter_fallback=self.drafter_fallback,
            fallback_reason=self.fallback_reason, config_error=self.config_error, num_launches=self.num_launches,
            num_crashes=self.num_crashes, num_hangs=self.num_hangs, num_probe_failures=self.num_probe_failures,
        )  # fmt: skip

    def _wants_drafter(self) -> bool:
        return self.drafter_available and self.drafter_enabled and not self.fallen_back

    async def start(self) -> None:
        """Return once the server is ready or refused its arguments (S2); raise once the policy gave up."""
        self._stopping = False
        self._settled.clear()
        self._loop_task = asyncio.create_task(self._run(), name="sglang-supervisor")
        settled = asyncio.ensure_future(self._settled.wait())
        await asyncio.wait({settled, self._loop_task}, return_when=asyncio.FIRST_COMPLETED)
        if not settled.done():  # the loop ended first: stopped meanwhile, or a bug (raised here)
            settled.cancel()
            self._loop_task.result()
        if self.state == "failed":
            raise RuntimeError(
                f"the SGLang server did not come up after {self.num_crashes} crashes (last: {self.last_failure}); "
                f"see {self.log_path}"
            )

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

    # -- the loop ------------------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._stopping:
            drafter = self._launch_drafter = self._wants_drafter()
            self._relaunch.clear()
            started = await self._launch(drafter)
            if started == "stopped":
                break
            if started == "exited" and await self._config_error():
                await self._terminate()
                self.state = "config_error"
                self._settled.set()
                await self._relaunch.wait()  # S2: only a switch that changes the command, or stop, goes on
                self.config_error = None
                continue
            if started == "healthy" and drafter and self._drafter_probe is not None:
                probed, reason = await self._check_drafter()
                if probed == "asked":
                    await self._terminate()
                    continue  # a drafter switch or stop during the probe
                if probed == "broken":
                    self.num_probe_failures += 1
                    self._fall_back(reason)
                    await self._terminate()
                    continue
                if probed == "silent":
                    started, self.last_failure = "timeout", reason
            if started == "healthy":
                self.state, self.drafter_active = "ready", drafter
                self._settled.set()
                watched = await self._watch()
                self.drafter_active = False
                if watched == "asked":
                    continue  # a drafter switch or stop: not a crash
            if self._stopping:
                break
            await self._terminate()  # S5: orphans of a dead or hung leader go too
            if not await self._crashed(drafter):
                return
        await self._terminate()

    async def _crashed(self, drafter: bool) -> bool:
        """S5: count the failure and follow the policy; False when it gave up."""
        self.num_crashes += 1
        decision = self._policy.record(self._clock(), drafter)
        log.warning("SGLang server failed (crash %d, drafter %s, %s): %s", self.num_crashes, drafter,
                    self.last_failure, decision.action)
        if decision.action == "give_up":
            self.state = "failed"
            self._settled.set()
            return False
        if decision.action == "fallback":
            self._fall_back(
                f"{decision.num_drafter_crashes} crashes with the drafter on within the crash window "
                f"(last: {self.last_failure})"
            )
        self.state = "backoff"
        await self._pause(decision.delay_s)
        return True

    def _fall_back(self, reason: str) -> None:
        self.fallen_back, self.fallback_reason = True, reason
        log.error("SGLang drafter fallback: %s", reason)

    async def _pause(self, delay_s: float) -> None:
        if delay_s > 0:
            sleeper = asyncio.ensure_future(self._sleep(delay_s))
            woken = asyncio.ensure_future(self._relaunch.wait())
            await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
            sleeper.cancel()
            woken.cancel()

    # -- one launch ----------------------------------------------------------------------------------
    async def _launch(self, drafter: bool) -> Started:
        """S1: launch and wait for the first /health 200."""
        port = pick_port(self._preferred_port)
        self.command = self._build_command(drafter, port)
        self.base_url = f"http://127.0.0.1:{port}"
        self.state = "starting"
        self.num_launches += 1
        log.info("launching SGLang server %d on port %d (drafter %s), log %s", self.num_launches, port, drafter,
                 self.log_path)
        try:
            process = await self._launcher(self.command, self._env, self.log_path)
        except OSError as exc:  # e.g. the interpreter is missing: a crash, the policy decides
            self.last_failure = f"launch failed: {exc}"
            log.error("SGLang server %s", self.last_failure)
            return "exited"
        self._process = process
        deadline = self._clock() + self._startup_timeout_s
        exited = asyncio.ensure_future(process.wait())
        try:
            while not self._stopping:
                if exited.done() or process.returncode is not None:
                    self.last_failure = f"exit code {process.returncode} during start-up"
                    return "exited"
                if await self._probe(self.base_url):
                    return "healthy"
                if self._clock() > deadline:
                    self.last_failure = f"start-up timeout: no /health 200 within {self._startup_timeout_s:g} s"
                    log.error("SGLang server %s", self.last_failure)
                    return "timeout"
                await asyncio.wait({exited}, timeout=self._health_poll_s)
            return "stopped"
        finally:
            exited.cancel()

    async def _config_error(self) -> bool:
        """S1/S2: classify an exit before /health answered from the exit code and this launch's log."""
        process = self._process
        tail = await asyncio.to_thread(read_log_tail, self.log_path, self._settings.log_tail_bytes)
        found = classify_exit(process.returncode if process else None, this_launch(tail))
        if found is None:
            return False
        self.config_error = found
        self.last_failure = f"config error: {found.line}"
        log.error("SGLang server refused its arguments (exit %d): %s%s", found.exit_code, found.line,
                  f" at {found.where}" if found.where else "")
        return True

    async def _check_drafter(self) -> tuple[Probed, str]:
        """S3: ("works" | "broken" (P2) | "silent" (P3) | "asked" (switch or stop meanwhile), reason)."""
        timeout_s = self._settings.drafter_probe_timeout_s
        probing = asyncio.ensure_future(asyncio.wait_for(self._drafter_probe(self.base_url), timeout=timeout_s))
        asked = asyncio.ensure_future(self._relaunch.wait())
        await asyncio.wait({probing, asked}, return_when=asyncio.FIRST_COMPLETED)
        asked.cancel()
        if not probing.done():
            probing.cancel()
            await asyncio.gather(probing, return_exceptions=True)
            return "asked", ""
        try:
            reason = probing.result()
        except asyncio.TimeoutError:
            return "silent", f"drafter probe: no answer within {timeout_s:g} s"
        except Exception as exc:  # the server failed the request: a crash with the drafter on
            return "silent", f"drafter probe: no answer ({type(exc).__name__}: {exc})"
        return ("works", "") if reason is None else ("broken", reason)

    async def _watch(self) -> Watched:
        """S4: wait for an exit, a hang, or a relaunch request (drafter switch, stop)."""
        assert self._process is not None
        exited = asyncio.ensure_future(self._process.wait())
        asked = asyncio.ensure_future(self._relaunch.wait())
        watchers = {exited, asked}
        hung = None
        if self._health_check is not None:
            hung = asyncio.ensure_future(self._watch_health())
            watchers.add(hung)
        await asyncio.wait(watchers, return_when=asyncio.FIRST_COMPLETED)
        for task in watchers:
            if not task.done():
                task.cancel()
        if exited.done():
            self.last_failure = f"exit code {self._process.returncode}"
            return "exited"
        if hung is not None and hung.done():
            self.num_hangs += 1
            s = self._settings
            self.last_failure = (
                f"hang: {s.hang_after_misses} /health_generate checks without a 200 "
                f"within {s.health_check_timeout_s:g} s"
            )
            log.error("SGLang server %s", self.last_failure)
            return "hung"
        self.draining = True  # the engine stops taking requests while in-flight ones finish
        try:
            if not self._stopping:
                await self._drain()
            await self._terminate()
        finally:
            self.draining = False
        return "asked"

    async def _watch_health(self) -> None:
        """Return after hang_after_misses consecutive /health_generate misses."""
        s, misses = self._settings, 0
        while misses < s.hang_after_misses:
            await self._sleep(s.health_check_interval_s)
            try:
                ok = await asyncio.wait_for(
                    self._health_check(self.base_url, s.health_check_timeout_s), timeout=s.health_check_timeout_s
                )
            except asyncio.TimeoutError:
                ok = False
            misses = 0 if ok else misses + 1
            if not ok:
                log.warning("SGLang /health_generate miss %d of %d", misses, s.hang_after_misses)

    async def _drain(self) -> None:
        deadline = self._clock() + self._drain_s
        while self._inflight() > 0 and self._clock() < deadline and not self._stopping:
            await self._sleep(0.05)

    async def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            await terminate_group(process, self._stop_grace_s)
