"""A trace as three columns the simulator samples from: prompt tokens, output tokens, prefix blocks.

Formats (names resolve as in ray_dspine.bench.traces: "azure-code", "azure-conv", "mooncake", or a path):
  Azure CSV   `TIMESTAMP,ContextTokens,GeneratedTokens`: prompt = max(1, ContextTokens),
              output = max(1, GeneratedTokens), no prefix blocks.
  Mooncake    JSONL `{timestamp (ms), input_length, output_length, hash_ids}`: prompt = max(1,
              input_length), output = max(1, output_length); prefix blocks = the ids of the prompt's
              full 512-token blocks, hash_ids[:input_length // 512], as strings (equal ids = a
              reusable cached prefix).
  span_s      last arrival - first arrival (timestamps of the file), so rate = rows / span_s.
  clamp       prompt + output <= max_context_tokens (the prompt is cut; its blocks with it).
Complexity: O(rows) time and memory; the file is read once.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from ray_dspine.bench.traces.loader import file_sha256, resolve_trace_path

BLOCK_TOKENS = 512


@dataclass(frozen=True)
class TraceTable:
    name: str
    path: str
    sha256: str
    span_s: float
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    prefix_blocks: tuple[tuple[str, ...], ...] | None

    @property
    def num_requests(self) -> int:
        return int(self.prompt_tokens.shape[0])

    @property
    def mean_rate_per_s(self) -> float:
        return self.num_requests / self.span_s if self.span_s > 0 else 0.0


def _azure_time(text: str) -> float:
    text = text.strip()
    if "." in text:
        whole, fraction = text.split(".", 1)
        text = f"{whole}.{fraction[:6].ljust(6, '0')}"
    return datetime.fromisoformat(text).timestamp()


def parse_azure(lines: list[str]) -> tuple[list[float], list[int], list[int]]:
    reader = csv.DictReader(lines)
    stamps, prompts, outputs = [], [], []
    for row in reader:
        stamps.append(_azure_time(row["TIMESTAMP"]))
        prompts.append(max(1, int(row["ContextTokens"])))
        outputs.append(max(1, int(row["GeneratedTokens"])))
    return stamps, prompts, outputs


def parse_mooncake(lines: list[str]) -> tuple[list[float], list[int], list[int], list[tuple[str, ...]]]:
    stamps, prompts, outputs, blocks = [], [], [], []
    for line in lines:
        if not line.strip():
            continue
        row = json.loads(line)
        prompt = max(1, int(row["input_length"]))
        stamps.append(float(row["timestamp"]) / 1000.0)
        prompts.append(prompt)
        outputs.append(max(1, int(row["output_length"])))
        blocks.append(tuple(str(b) for b in row["hash_ids"][: prompt // BLOCK_TOKENS]))
    return stamps, prompts, outputs, blocks


def load_trace_table(name_or_path: str, *, max_context_tokens: int, traces_dir: Path | None = None) -> TraceTable:
    """Read a named trace or a file (format by suffix: .csv is Azure, else Mooncake JSONL)."""
    name, path = resolve_trace_path(name_or_path, traces_dir)
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix.lower() == ".csv":
        stamps, prompts, outputs = parse_azure(lines)
        blocks = None
    else:
        stamps, prompts, outputs, block_lists = parse_mooncake(lines)
        blocks = block_lists
    if not stamps:
        raise ValueError(f"trace {name!r} at {path} has no requests")
    out = np.minimum(np.asarray(outputs, dtype=np.int64), max_context_tokens - 1)
    prompt = np.clip(np.asarray(prompts, dtype=np.int64), 1, max_context_tokens - out)
    if blocks is not None:
        blocks = [b[: int(p) // BLOCK_TOKENS] for b, p in zip(blocks, prompt)]
    return TraceTable(
        name=name,
        path=str(path),
        sha256=file_sha256(path),
        span_s=max(stamps) - min(stamps),
        prompt_tokens=prompt,
        output_tokens=out,
        prefix_blocks=None if blocks is None else tuple(blocks),
    )
