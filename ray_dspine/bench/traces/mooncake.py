"""Mooncake FAST'25 trace: JSONL `{timestamp (ms), input_length, output_length, hash_ids}`.

Each hash id names one 512-token prefix block; equal ids mean reusable KV blocks. The trace has no
session ids, so sessions are rebuilt.

Session rule: process requests in file (= timestamp) order. Request j offers the key
`K_j = hash_ids_j[0 : floor(input_length_j / 512)]`, its *full* blocks (its last block is usually
partial, and a later turn that extends the text fills that block with new tokens, so it gets a new id).
Request i's parent is the earlier request j with the longest key that is a prefix of `hash_ids_i`,
subject to `len(K_j) >= min_shared_blocks` (default 2: in the conversation trace every request starts
with block 0, a shared 512-token system prompt, so one shared block says nothing about the
conversation); among equal keys the latest j wins. A request with a parent joins its parent's session;
otherwise it opens a new one. `turn_index` is the request's position in its session by arrival.
On the real conversation trace this gives 8,056 sessions from 12,031 requests (2,012 with two or more
turns, at most 43 turns; median gap between a turn and its parent 126 s).

Arrival rule: timestamps come in steps of `step_ms` = 3,000 ms. The r requests stamped t get arrivals
`t + step_ms * u_(1..r)`, the sorted draws of r uniforms in [0, 1) from `numpy.random.default_rng(seed)`,
given in file order, so order inside a step is kept and the spread is the same on every run.

Prompts: `SyntheticPrompt(namespace="mooncake", block_ids=hash_ids, num_tokens=input_length)`, so
shared hash ids render to shared text (see synthetic.py).
Complexity: O(total hash ids) time and memory (a trie over the keys).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .model import SyntheticPrompt, TraceRequest
from .synthetic import BLOCK_TOKENS, clamp_synthetic

_END = -1  # trie slot holding the index of the latest request whose key ends at this node


class MooncakeRow:
    __slots__ = ("timestamp_ms", "input_length", "output_length", "hash_ids")

    def __init__(self, timestamp_ms: int, input_length: int, output_length: int, hash_ids: list[int]):
        self.timestamp_ms = timestamp_ms
        self.input_length = input_length
        self.output_length = output_length
        self.hash_ids = hash_ids


def read_rows(path: Path) -> list[MooncakeRow]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line_number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                rows.append(
                    MooncakeRow(
                        int(d["timestamp"]), int(d["input_length"]), int(d["output_length"]), list(d["hash_ids"])
                    )
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{line_number}: not a Mooncake row ({exc})") from exc
    return rows


def find_parents(rows: list[MooncakeRow], min_shared_blocks: int = 2) -> list[int | None]:
    """Apply the session rule: index of each request's parent, or None."""
    trie: dict[int, dict] = {}
    parents: list[int | None] = []
    for i, row in enumerate(rows):
        node = trie
        best = None
        for depth, block in enumerate(row.hash_ids, start=1):
            child = node.get(block)
            if child is None:
                break
            node = child
            if _END in node and depth >= min_shared_blocks:
                best = node[_END]
        parents.append(best)
        key = row.hash_ids[: row.input_length // BLOCK_TOKENS]
        if not key:
            continue
        node = trie
        for block in key:
            node = node.setdefault(block, {})
        node[_END] = i
    return parents


def spread_arrivals(timestamps_ms: list[int], *, step_ms: float, seed: int) -> list[float]:
    """Apply the arrival rule; returns seconds."""
    rng = np.random.default_rng(seed)
    out: list[float] = []
    start = 0
    while start < len(timestamps_ms):
        end = start
        while end < len(timestamps_ms) and timestamps_ms[end] == timestamps_ms[start]:
            end += 1
        offsets = np.sort(rng.random(end - start)) * step_ms
        out.extend((timestamps_ms[start] + float(o)) / 1000.0 for o in offsets)
        start = end
    return out


def parse_mooncake(
    path: Path,
    *,
    seed: int,
    max_prompt_tokens: int | None,
    source: str = "mooncake",
    min_shared_blocks: int = 2,
    step_ms: float = 3000.0,
) -> list[TraceRequest]:
    rows = read_rows(path)
    order = sorted(range(len(rows)), key=lambda i: rows[i].timestamp_ms)
    rows = [rows[i] for i in order]
    parents = find_parents(rows, min_shared_blocks)
    arrivals = spread_arrivals([r.timestamp_ms for r in rows], step_ms=step_ms, seed=seed)
    session_of: list[int] = []
    turns: dict[int, int] = {}
    requests: list[TraceRequest] = []
    for i, (row, parent) in enumerate(zip(rows, parents)):
        session = session_of[parent] if parent is not None else i
        session_of.append(session)
        turn_index = turns.get(session, 0)
        turns[session] = turn_index + 1
        base = SyntheticPrompt(namespace="mooncake", block_ids=row.hash_ids, num_tokens=max(1, row.input_length))
        prompt = clamp_synthetic(base, max_prompt_tokens)
        requests.append(
            TraceRequest(
                request_id=f"{source}-{i:06d}",
                session_id=f"{source}-s{session:06d}",
                turn_index=turn_index,
                arrival_s=arrivals[i],
                workload_class="chat",
                synthetic_prompt=prompt,
                prompt_tokens=prompt.num_tokens,
                recorded_prompt_tokens=row.input_length,
                max_tokens=max(1, row.output_length),
                prefix_block_ids=row.hash_ids,
                source=source,
            )
        )
    return requests
