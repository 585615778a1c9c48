"""Raw replay measurements: one `RequestRecord` per request, stored as JSONL.

Times: `start_unix_s`/`end_unix_s` are wall-clock (for people and receipts); every duration comes from
the monotonic clock: `ttft_s` is send -> first content chunk, `e2e_s` is send -> end of stream,
`chunk_offsets_s[i]` is content chunk i's arrival after send, `itl_s` holds the gaps between
consecutive content chunks (a chunk may carry several tokens under speculative decoding;
`chunk_tokens[i]` holds its count when the server reports it, else 1), and `start_offset_s` is the send
time after the replay started (for throughput over time). `server_replica_s` / `server_ingress_s` come
from the answer's Server-Timing header (ray_dspine/serve/server_timing.py), None when it has none. A
request that failed keeps what was measured before the failure and names it in `error_kind` / `error`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, Field

ErrorKind = Literal[
    "http_error",  # 4xx/5xx status; see http_status
    "connect",  # could not connect
    "timeout",  # past the per-request timeout
    "stream_cut",  # connection dropped mid-stream
    "incomplete_stream",  # stream ended without [DONE] / final usage
    "stream_error",  # the server sent an error event inside the stream
    "bad_response",  # unparseable SSE data
    "cancelled",  # interrupted (Ctrl-C) while in flight
]


def tpot(ok: bool, ttft_s: float | None, e2e_s: float | None, output_tokens: int | None) -> float | None:
    """Time per output token after the first: (e2e - ttft) / (output_tokens - 1); None under two tokens
    or on failure."""
    if not ok or ttft_s is None or e2e_s is None or output_tokens is None or output_tokens < 2:
        return None
    return (e2e_s - ttft_s) / (output_tokens - 1)


class RequestRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(description="Unique per sent request: trace request id + repetition.")
    trace_request_id: str = Field(description="The trace's request id.")
    session_id: str = Field(description="x-session-id sent.")
    turn_index: int = Field(ge=0)
    workload_class: str = Field(description="agent, chat or code.")
    repetition: int = Field(ge=0, description="Repetition of the whole trace, from 0.")
    api: Literal["chat", "completions", "messages", "responses"]
    arm: str = Field(default="", description="x-dspine-arm response header.")
    pool: str = Field(default="", description="x-dspine-pool response header.")
    replica: str = Field(default="", description="x-dspine-replica response header.")
    path: str = Field(default="", description="x-dspine-path header, else usage.path.")
    server_replica_s: float | None = Field(
        default=None, description="Server-Timing `replica`: the replica's receipt of the request to its first chunk."
    )
    server_ingress_s: float | None = Field(
        default=None, description="Server-Timing `ingress`: the ingress taking the request to its first chunk."
    )
    http_status: int | None = Field(default=None, description="Response status; None if none came.")
    prompt_tokens: int = Field(ge=0, description="usage.prompt_tokens, else the trace's estimate.")
    trace_prompt_tokens: int = Field(ge=0, description="Prompt tokens the trace asked for (after clamp).")
    max_tokens: int = Field(ge=1, description="max_tokens sent (recorded output length, capped).")
    output_tokens: int = Field(ge=0, description="usage.completion_tokens, else the sum of chunk_tokens.")
    cached_prompt_tokens: int | None = Field(default=None, description="Prompt tokens served from cache, if told.")
    ttft_s: float | None = Field(default=None, ge=0.0, description="Send to first content chunk.")
    e2e_s: float | None = Field(default=None, ge=0.0, description="Send to end of stream (or failure).")
    itl_s: list[float] = Field(default_factory=list, description="Gaps between consecutive content chunks.")
    chunk_offsets_s: list[float] = Field(default_factory=list, description="Content chunk arrivals after send.")
    chunk_tokens: list[int] = Field(default_factory=list, description="Tokens per content chunk (1 if untold).")
    accept_length: float | None = Field(default=None, description="usage.accept_length (tokens per verify step).")
    verify_steps: int | None = Field(default=None, description="usage.verify_steps.")
    accept_histogram: list[int] = Field(default_factory=list, description="k counts steps that gave k+1 tokens.")
    finish_reason: str | None = None
    error_kind: ErrorKind | None = None
    error: str | None = Field(default=None, description="Human-readable failure, None when the request succeeded.")
    start_offset_s: float = Field(ge=0.0, description="Send time after the replay started (monotonic).")
    start_unix_s: float = Field(description="Wall-clock send time.")
    end_unix_s: float = Field(description="Wall-clock end time.")
    output_text: str | None = Field(default=None, description="Generated text, only when asked to keep it.")
    num_tools: int = Field(default=0, ge=0, description="Tools the request carried.")
    recorded_calls: list[str] = Field(default_factory=list, description="Functions the recorded reply called.")
    answer_calls: list[str] = Field(default_factory=list, description="Functions the answer called, by call index.")

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def ttft_outside_replica_s(self) -> float | None:
        """ttft - server_replica_s: the client's time to first chunk spent outside the replica (HTTP, the
        proxy, the ingress, the router, Ray's transport both ways); None on failure or without the header."""
        if not self.ok or self.ttft_s is None or self.server_replica_s is None:
            return None
        return self.ttft_s - self.server_replica_s

    @property
    def tpot_s(self) -> float | None:
        return tpot(self.ok, self.ttft_s, self.e2e_s, self.output_tokens)


class RecordWriter:
    """Appends records to a JSONL file as they complete (so an interrupted run keeps them)."""

    def __init__(self, path: Path):
        self.path = path
        self._file: IO[str] | None = None

    def open(self) -> RecordWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")
        return self

    def write(self, record: RequestRecord) -> None:
        if self._file is None:
            raise RuntimeError("RecordWriter.write before open")
        self._file.write(record.model_dump_json() + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def write_records(path: Path, records: Iterable[RequestRecord]) -> None:
    writer = RecordWriter(path).open()
    try:
        for record in records:
            writer.write(record)
    finally:
        writer.close()


def read_records(path: Path) -> list[RequestRecord]:
    with open(path, encoding="utf-8") as f:
        return [RequestRecord.model_validate(json.loads(line)) for line in f if line.strip()]
