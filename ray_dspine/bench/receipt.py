"""The receipt written beside every replay result: what ran, where, on what, and how.

It pins: this repository's git commit and dirty flag (None where there is no git or no commit), the
versions of Python and the serving libraries (read with importlib.metadata, never imported), this
package's version, the engine arguments and model/draft hashes the server reports at
`/v1/dspine/engine` (None if it answers 404), the hardware of the machine that ran the replay (CPU model
from /proc/cpuinfo, logical cores, memory from /proc/meminfo, and `nvidia-smi` GPUs when present), the
trace file and its sha256, the replay settings (warm-up, repetitions, ...), the command line, start and
end times (UTC, ISO 8601), and the sha256 of each output file it sits beside.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from .traces.model import Trace

PACKAGE_DISTRIBUTION = "ray-dspine"
TRACKED_DISTRIBUTIONS = (
    "ray", "torch", "transformers", "sglang", "numpy", "pydantic", "httpx", "matplotlib", "flashinfer-python",
)


class GitState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    commit: str | None = Field(default=None, description="HEAD commit; None without git or commits.")
    dirty: bool | None = Field(default=None, description="Uncommitted changes present.")
    note: str | None = Field(default=None, description="Why commit/dirty are missing, if they are.")


class GpuInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    memory_total: str = Field(description="As nvidia-smi prints it, e.g. '143771 MiB'.")
    driver_version: str


class Hardware(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpu_model: str | None = None
    num_cpus: int | None = Field(default=None, description="Logical cores (os.cpu_count()).")
    memory_total_bytes: int | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)
    gpu_note: str | None = Field(default=None, description="Why gpus is empty, when it is.")


class TraceInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    path: str
    sha256: str
    format: str
    seed: int
    num_requests: int = Field(ge=0)
    num_sessions: int = Field(ge=0)
    max_prompt_tokens: int | None
    num_clamped: int = Field(ge=0)
    tool_calls: str
    num_tools: int = Field(default=0, ge=0, description="Tools every request carried (--tools).")


class Receipt(BaseModel):
    model_config = ConfigDict(extra="forbid")

    package_version: str
    git: GitState
    versions: dict[str, str | None] = Field(description="Distribution versions; None when not installed.")
    endpoint: str
    model: str
    engine: dict[str, JsonValue] | None = Field(description="The server's /v1/dspine/engine answer.")
    hardware: Hardware = Field(description="Machine that ran the replay client.")
    trace: TraceInfo
    settings: dict[str, JsonValue] = Field(description="Replay and client settings (no secrets).")
    warmup_requests: int = Field(ge=0)
    repetitions: int = Field(ge=1)
    command_line: list[str]
    started_at: str
    ended_at: str
    interrupted: bool
    outputs_sha256: dict[str, str] = Field(default_factory=dict, description="File name -> sha256.")


def _run(args: Sequence[str], cwd: Path | None = None) -> str | None:
    try:
        done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(path: Path | None = None) -> GitState:
    """Commit and dirty flag of the repository holding `path` (default: this package)."""
    where = path or Path(__file__).resolve().parent
    commit = _run(["git", "rev-parse", "HEAD"], cwd=where)
    if commit is None:
        return GitState(note="no git repository or no commit")
    status = _run(["git", "status", "--porcelain"], cwd=where)
    return GitState(commit=commit.strip(), dirty=bool(status.strip()) if status is not None else None)


def distribution_versions(names: Iterable[str] = TRACKED_DISTRIBUTIONS) -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def package_version() -> str:
    try:
        return metadata.version(PACKAGE_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (package not installed)"


def _cpu_model(cpuinfo: str) -> str | None:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "Hardware"):
            return value.strip()
    return platform.processor() or None


def _memory_bytes(meminfo: str) -> int | None:
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


def cpu_name(cpuinfo: str | None = None, cores: int | None = None) -> str:
    """The CPU's model name and the cores this process may use: a CPU benchmark's `device_name`, e.g.
    'Intel(R) Xeon(R) Processor, 2 cores' (read from /proc/cpuinfo and the affinity mask unless given)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{_cpu_model(cpuinfo) or platform.machine()}, {cores} cores"


def parse_nvidia_smi(csv_text: str) -> list[GpuInfo]:
    """Rows of `nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv` (header skipped)."""
    gpus = []
    for line in csv_text.strip().splitlines()[1:]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append(GpuInfo(name=parts[0], memory_total=parts[1], driver_version=parts[2]))
    return gpus


def hardware() -> Hardware:
    def read(path: str) -> str:
        try:
            return Path(path).read_text()
        except OSError:
            return ""

    smi = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv"])
    gpus = parse_nvidia_smi(smi) if smi else []
    return Hardware(
        cpu_model=_cpu_model(read("/proc/cpuinfo")),
        num_cpus=os.cpu_count(),
        memory_total_bytes=_memory_bytes(read("/proc/meminfo")),
        gpus=gpus,
        gpu_note=None if gpus else "nvidia-smi absent or found no GPU",
    )


def trace_info(trace: Trace) -> TraceInfo:
    return TraceInfo(
        name=trace.name,
        path=str(trace.path),
        sha256=trace.sha256,
        format=trace.format,
        seed=trace.seed,
        num_requests=len(trace.requests),
        num_sessions=trace.num_sessions,
        max_prompt_tokens=trace.max_prompt_tokens,
        num_clamped=trace.num_clamped,
        tool_calls=trace.tool_calls,
        num_tools=trace.num_tools,
    )


def utc_iso(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, tz=timezone.utc).isoformat()


def files_sha256(paths: Iterable[Path]) -> dict[str, str]:
    out = {}
    for path in paths:
        if path.is_file():
            out[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out
