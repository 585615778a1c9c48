"""Azure LLM inference trace 2023 (Splitwise): CSV `TIMESTAMP,ContextTokens,GeneratedTokens`.

Rule: row i (in timestamp order) becomes its own one-turn session; `arrival_s = T_i - T_0` with
timestamps read as `YYYY-MM-DD HH:MM:SS.fffffff` (digits past microseconds dropped). The trace has
no text and no prefixes, so each request gets its own filler blocks
`SyntheticPrompt(namespace=f"{source}-{i}", block_ids=0..ceil(n/512)-1, num_tokens=n)`: no two
requests share prompt text. The code trace is workload class "code", the conversation trace "chat".
Complexity: O(rows) after an O(rows log rows) sort.
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

from .model import SyntheticPrompt, TraceRequest, WorkloadClass
from .synthetic import BLOCK_TOKENS, clamp_synthetic

_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _parse_time(text: str) -> datetime:
    text = text.strip()
    if "." in text:
        whole, fraction = text.split(".", 1)
        text = f"{whole}.{fraction[:6].ljust(6, '0')}"
    return datetime.fromisoformat(text)


def parse_azure(
    path: Path, *, workload_class: WorkloadClass, max_prompt_tokens: int | None, source: str
) -> list[TraceRequest]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in _COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not an Azure trace CSV (missing columns {missing})")
        rows = []
        for line_number, row in enumerate(reader, start=2):
            try:
                rows.append((_parse_time(row["TIMESTAMP"]), int(row["ContextTokens"]), int(row["GeneratedTokens"])))
            except ValueError as exc:
                raise ValueError(f"{path}:{line_number}: bad row ({exc})") from exc
    rows.sort(key=lambda r: r[0])
    if not rows:
        return []
    start = rows[0][0]
    requests = []
    for i, (stamp, context_tokens, generated_tokens) in enumerate(rows):
        num_tokens = max(1, context_tokens)
        num_blocks = -(-num_tokens // BLOCK_TOKENS)
        prompt = clamp_synthetic(
            SyntheticPrompt(namespace=f"{source}-{i}", block_ids=list(range(num_blocks)), num_tokens=num_tokens),
            max_prompt_tokens,
        )
        requests.append(
            TraceRequest(
                request_id=f"{source}-{i:06d}",
                session_id=f"{source}-s{i:06d}",
                turn_index=0,
                arrival_s=(stamp - start).total_seconds(),
                workload_class=workload_class,
                synthetic_prompt=prompt,
                prompt_tokens=prompt.num_tokens,
                recorded_prompt_tokens=context_tokens,
                max_tokens=max(1, generated_tokens),
                source=source,
            )
        )
    return requests
