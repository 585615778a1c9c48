"""Find a trace by name or path, parse it, and cut it to size.

Names: "mooncake", "azure-code", "azure-conv", "tau-bench" resolve inside the traces folder
(`--traces-dir`, else env DSPINE_TRACES_DIR, else `../shared/data/traces` next to the repository).
Any other argument is a file path whose format is detected: `.csv` -> Azure (class "code" if the
file name contains "code", else "chat"); JSONL whose first row has `hash_ids` -> Mooncake; a JSON list
of runs with `traj` -> tau-bench; anything else -> OpenAI conversation log.
Limit rule: sessions are ordered by their first request's position in arrival order;
`skip_conversations` drops the first K sessions (a tuning set left out of a report, or the other way
round), `max_conversations` keeps the first N of the rest, then `max_requests` keeps the first N requests in
arrival order (a stable sort on `arrival_s`, so ties keep file order: a conversation's turns stay in
order). Tools (`tools`): "from-trace" gives every request the trace's tools (tools.py), "none" none.
Complexity: O(n log n) for n requests, plus parsing.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .azure import parse_azure
from .model import ToolCallMode, ToolsMode, Trace, TraceRequest
from .mooncake import parse_mooncake
from .openai_log import parse_openai_log
from .tau_bench import parse_tau_bench
from .tools import NoToolsInTrace, tools_from_trace

NAMED_TRACES: dict[str, str] = {
    "mooncake": "mooncake/conversation_trace.jsonl",
    "azure-code": "azure/AzureLLMInferenceTrace_code.csv",
    "azure-conv": "azure/AzureLLMInferenceTrace_conv.csv",
    "tau-bench": "tau-bench/gpt-4o-airline.json",
}
TRACES_DIR_ENV = "DSPINE_TRACES_DIR"


class TraceNotFoundError(FileNotFoundError):
    """The named trace or file does not exist; the message says where it looked."""


def default_traces_dir() -> Path:
    """env DSPINE_TRACES_DIR, else `<repository>/../shared/data/traces`."""
    env = os.environ.get(TRACES_DIR_ENV)
    if env:
        return Path(env)
    repository = Path(__file__).resolve().parents[3]
    return repository.parent / "shared" / "data" / "traces"


def resolve_trace_path(name_or_path: str, traces_dir: Path | None = None) -> tuple[str, Path]:
    """(trace name, file path) for a known name or an existing file."""
    if name_or_path in NAMED_TRACES:
        folder = traces_dir or default_traces_dir()
        path = folder / NAMED_TRACES[name_or_path]
        if not path.is_file():
            raise TraceNotFoundError(
                f"trace {name_or_path!r} not found at {path} (set --traces-dir or {TRACES_DIR_ENV})"
            )
        return name_or_path, path
    path = Path(name_or_path)
    if not path.is_file():
        known = ", ".join(sorted(NAMED_TRACES))
        raise TraceNotFoundError(f"{name_or_path!r} is neither a known trace ({known}) nor a file")
    return path.stem, path


def detect_format(path: Path) -> str:
    if path.suffix.lower() == ".csv":
        return "azure"
    with open(path, encoding="utf-8") as f:
        first = f.readline().strip()
    try:
        row = json.loads(first)
        if isinstance(row, dict) and "hash_ids" in row:
            return "mooncake"
    except json.JSONDecodeError:
        pass
    if first.startswith("["):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return "openai-log"
        if isinstance(data, list) and data and all(isinstance(r, dict) and "traj" in r for r in data):
            return "tau-bench"
    return "openai-log"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def limit_requests(
    requests: list[TraceRequest],
    *,
    max_conversations: int | None,
    max_requests: int | None,
    skip_conversations: int = 0,
) -> list[TraceRequest]:
    """Apply the limit rule."""
    ordered = sorted(requests, key=lambda r: r.arrival_s)
    if skip_conversations or max_conversations is not None:
        sessions = list(dict.fromkeys(r.session_id for r in ordered))[skip_conversations:]
        chosen = set(sessions if max_conversations is None else sessions[:max_conversations])
        ordered = [r for r in ordered if r.session_id in chosen]
    if max_requests is not None:
        ordered = ordered[:max_requests]
    return ordered


def load_trace(
    name_or_path: str,
    *,
    traces_dir: Path | None = None,
    seed: int = 0,
    max_prompt_tokens: int | None = None,
    tool_calls: ToolCallMode = "native",
    session_rate_per_s: float | None = None,
    max_conversations: int | None = None,
    max_requests: int | None = None,
    skip_conversations: int = 0,
    tools: ToolsMode = "none",
) -> Trace:
    """Parse a named trace or a file into a `Trace` (requests in arrival order)."""
    name, path = resolve_trace_path(name_or_path, traces_dir)
    fmt = detect_format(path)
    if fmt == "mooncake":
        requests = parse_mooncake(path, seed=seed, max_prompt_tokens=max_prompt_tokens, source=name)
    elif fmt == "azure":
        workload_class = "code" if "code" in path.name.lower() else "chat"
        requests = parse_azure(path, workload_class=workload_class, max_prompt_tokens=max_prompt_tokens, source=name)
    elif fmt == "tau-bench":
        requests = parse_tau_bench(
            path,
            seed=seed,
            max_prompt_tokens=max_prompt_tokens,
            tool_calls=tool_calls,
            session_rate_per_s=session_rate_per_s,
            source=name,
        )
    else:
        requests = parse_openai_log(
            path,
            seed=seed,
            max_prompt_tokens=max_prompt_tokens,
            tool_calls=tool_calls,
            session_rate_per_s=session_rate_per_s,
            source=name,
        )
    schemas = tools_from_trace(requests) if tools == "from-trace" else []
    if tools == "from-trace" and not schemas:
        raise NoToolsInTrace(f"trace {name!r} records no tool calls, so it has no tools to send; leave out --tools "
                             "or replay an agent trace (tau-bench, an OpenAI log with tool calls)")
    requests = limit_requests(
        requests, max_conversations=max_conversations, max_requests=max_requests, skip_conversations=skip_conversations
    )
    for request in requests:
        request.tools = schemas or None
    return Trace(
        name=name,
        path=path.resolve(),
        sha256=file_sha256(path),
        format=fmt,
        seed=seed,
        max_prompt_tokens=max_prompt_tokens,
        tool_calls=tool_calls,
        tools=tools,
        num_tools=len(schemas),
        num_clamped=sum(1 for r in requests if r.clamped),
        requests=requests,
    )
