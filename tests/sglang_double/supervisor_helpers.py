"""Helpers for the supervisor tests: a fake server process, a supervisor with test settings, real launchers."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Callable

import httpx

from ray_dspine.engines.sglang import CrashPolicy, ServerSupervisor, launch_subprocess
from ray_dspine.engines.sglang.client import SGLangClient
from ray_dspine.engines.sglang.supervision import SupervisionConfig

HERE = Path(__file__).resolve().parent
SERVER = HERE / "supervisor_server.py"
STARTUP = HERE / "sglang_startup.py"


class FakeProcess:
    """A server process that runs until signalled, or exits at once with `exit_code`."""

    def __init__(self, exit_code: int | None = None):
        self.pid, self.returncode, self.signals = 4242, None, []
        self._exited = asyncio.Event()
        if exit_code is not None:
            self.exit(exit_code)

    def exit(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._exited.set()

    async def wait(self) -> int:
        await self._exited.wait()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        self.exit(-sig)


def policy(**overrides) -> CrashPolicy:
    fields = dict(max_restarts=5, crash_window_s=600.0, fallback_after_crashes=2, backoff_s=0.0, backoff_max_s=0.0)
    return CrashPolicy(**{**fields, **overrides})


def supervisor(tmp_path: Path, launcher, probe=None, **overrides) -> ServerSupervisor:
    """A drafter pool's supervisor: command `["--draft"]` with the drafter, `[]` without; fast settings."""

    async def healthy(base_url: str) -> bool:
        return True

    fields = dict(
        build_command=lambda drafter, port: ["--draft", str(port)] if drafter else [str(port)], env=dict(os.environ),
        log_dir=tmp_path, launcher=launcher, probe=probe or healthy, policy=policy(), drafter_available=True,
        startup_timeout_s=30.0, health_poll_s=0.01, stop_grace_s=2.0, drain_s=0.0,
    )  # fmt: skip
    fields.update(overrides)
    return ServerSupervisor(**fields)


def fast_supervision(**overrides) -> SupervisionConfig:
    fields = dict(health_check_interval_s=0.05, health_check_timeout_s=0.2, hang_after_misses=3,
                  drafter_probe_timeout_s=5.0)  # fmt: skip
    return SupervisionConfig(**{**fields, **overrides})


def script_launcher(script: Path, extra_env: dict[str, str] | None = None, argv: Callable | None = None):
    """Launch `python script ARGS` for real (own process group, log at the supervisor's path); ARGS are the
    supervisor's command after `--draft` is turned into `--speculative-algorithm DSPINE`, or `argv(command)`."""

    async def launch(command, env, log_path):
        if argv is not None:
            args = argv(command)
        else:
            port = command[-1]
            args = ["--port", port] + (["--speculative-algorithm", "DSPINE"] if "--draft" in command else [])
        return await launch_subprocess([sys.executable, str(script), *args], {**env, **(extra_env or {})}, log_path)

    return launch


async def http_healthy(base_url: str) -> bool:
    """GET /health as the engine asks it (200 is healthy)."""
    async with httpx.AsyncClient() as http:
        return await SGLangClient(http).healthy(base_url)


async def http_health_generate(base_url: str, timeout_s: float) -> bool:
    async with httpx.AsyncClient() as http:
        return await SGLangClient(http).health_generate(base_url, timeout_s)


def alive(pid: int) -> bool:
    """True while `pid` runs and is not a zombie (a zombie holds no memory; its parent may reap it late)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


async def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)
