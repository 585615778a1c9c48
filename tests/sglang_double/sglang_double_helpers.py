"""Helpers for the SGLang engine tests: pinned fake artifacts, configs, and a launcher that runs the double.

Capacity used throughout (H200, mem_fraction_static 0.85, shipped qwen3.8-27b profile, DSpine 2.03B / 5 layers
/ 16 draft tokens / 8,192-token window, ReplaySSM), as the planner computes it:
  with the drafter:  max_running_requests 71, state_slots_per_request 3, max_mamba_cache_size 215,
                     draft_vram_gb 8.2001 = 3.7811 GiB of weights + 463,360 tokens x 10,240 B (a ring of
                     71 x 8,192 tokens would be larger, so the window saves nothing at this pool size);
                     ReplaySSM keeps no per-draft snapshots, so k = q = 3.
  autoregressive:    max_running_requests 76, state_slots_per_request 3, max_mamba_cache_size 228.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Callable

from ray_dspine.artifacts import ArtifactRef, PinnedFile
from ray_dspine.capacity import CapacityConfig, DraftConfig
from ray_dspine.engines.sglang import SGLangEngineConfig, launch_subprocess

DOUBLE = Path(__file__).resolve().parent / "sglang_double.py"


async def double_launcher(command, env, log_path):
    """Run the double with the same flags the engine renders for `python -m sglang.launch_server`."""
    assert command[1:3] == ["-m", "sglang.launch_server"], command[:3]
    return await launch_subprocess([sys.executable, str(DOUBLE), *command[3:]], env, log_path)


def _pinned_folder(folder: Path, files: dict[str, bytes]) -> ArtifactRef:
    folder.mkdir(parents=True, exist_ok=True)
    pins = []
    for name, data in files.items():
        (folder / name).write_bytes(data)
        pins.append(PinnedFile(path=name, sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data)))
    return ArtifactRef(uri=str(folder), files=pins)


def dspine_capacity(**overrides) -> CapacityConfig:
    draft = DraftConfig(name="DSpine", draft_params_b=2.03, draft_num_layers=5, speculative_num_draft_tokens=16,
                        draft_window_tokens=8192)
    fields = {"gpu": "H200", "mem_fraction_static": 0.85, "draft": draft, "mamba_strategy": "replay_ssm"}
    return CapacityConfig(**{**fields, **overrides})


def config_factory(tmp_path: Path) -> Callable[..., SGLangEngineConfig]:
    target = _pinned_folder(tmp_path / "qwen3.8-27b", {"model-00001-of-00001.safetensors": b"target weights"})
    draft = _pinned_folder(tmp_path / "dspine-b16", {"model.safetensors": b"draft weights"})
    events = tmp_path / "events.jsonl"

    def make(env: dict[str, str] | None = None, **overrides) -> SGLangEngineConfig:
        fields = dict(
            target=target, draft=draft, speculative_algorithm="DSPINE", capacity=dspine_capacity(),
            python_executable=sys.executable, log_dir=str(tmp_path / "logs"), cache_dir=str(tmp_path / "cache"),
            env={"SGLANG_DOUBLE_EVENTS": str(events), **(env or {})},
            startup_timeout_s=120.0, health_poll_s=0.05, load_poll_s=60.0, restart_backoff_s=0.05,
            restart_backoff_max_s=0.2, stop_grace_s=5.0, drain_s=2.0, request_timeout_s=20.0,
        )
        fields.update(overrides)
        return SGLangEngineConfig(**fields)

    make.events = events  # type: ignore[attr-defined]
    return make


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)


def run(coro, timeout_s: float = 300.0):
    return asyncio.run(asyncio.wait_for(coro, timeout_s))
