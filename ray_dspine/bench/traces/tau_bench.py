"""tau-bench historical trajectories: a JSON list of runs `{task_id, trial, reward, info, traj}`.

`traj` is an OpenAI-style message list: system policy, user turns, assistant turns (text, or
`tool_calls` with `content: null`), and `tool` results (`tool_call_id`, `name`, `content`).
Rule: run r becomes session `f"{source}-{task_id}-{trial}"` of workload class "agent", and its
assistant turns become requests by the turn rule of conversation.py (history with the recorded tool
results, sent one after another). Runs start by the session start rule (all at 0 s unless a rate is
given). On gpt-4o-airline.json: 200 runs, 2,454 assistant turns (1,164 of them tool calls).
Complexity: O(sum of m^2) characters for runs of m messages.
"""

from __future__ import annotations

import json
from pathlib import Path

from .conversation import read_message, requests_from_conversation, session_starts
from .model import ToolCallMode, TraceRequest


def parse_tau_bench(
    path: Path,
    *,
    seed: int,
    max_prompt_tokens: int | None,
    tool_calls: ToolCallMode,
    session_rate_per_s: float | None = None,
    source: str = "tau-bench",
) -> list[TraceRequest]:
    with open(path, encoding="utf-8") as f:
        runs = json.load(f)
    if not isinstance(runs, list) or not all(isinstance(r, dict) and "traj" in r for r in runs):
        raise ValueError(f"{path}: not a tau-bench trajectory file (expected a list of runs with 'traj')")
    starts = session_starts(len(runs), session_rate_per_s=session_rate_per_s, seed=seed)
    requests: list[TraceRequest] = []
    for index, (run, start_s) in enumerate(zip(runs, starts)):
        task_id = run.get("task_id", index)
        trial = run.get("trial", 0)
        messages = [read_message(m) for m in run["traj"]]
        requests.extend(
            requests_from_conversation(
                messages,
                session_id=f"{source}-{task_id}-{trial}",
                source=source,
                workload_class="agent",
                arrival_s=start_s,
                tool_calls=tool_calls,
                max_prompt_tokens=max_prompt_tokens,
            )
        )
    return requests
