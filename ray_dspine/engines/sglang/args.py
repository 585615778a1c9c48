"""Render the `python -m sglang.launch_server ...` command of a replica from its config and capacity plan.

Rules:
  base      target path, --served-model-name, --host 127.0.0.1, --port, --dtype, --attention-backend,
            --linear-attn-backend, --trust-remote-code (when the pool trusts its checkpoints' code: the
            code files are pinned by sha256 like the weights), --reasoning-parser / --tool-call-parser
            (when set), --enable-metrics (Prometheus /metrics, needed for the Mamba gauges) and
            --enable-cache-report (cached prompt tokens in usage), then the planner's sizes
            (`plan.sglang_args`: --tp-size, --mem-fraction-static, --context-length, --max-running-requests,
            --max-mamba-cache-size, --mamba-radix-cache-strategy, --disable-overlap-schedule where the
            strategy needs it, and with a drafter --speculative-num-draft-tokens and ReplaySSM).
  drafter   drafter=True adds --speculative-algorithm DSPINE|DFLASH, --speculative-draft-model-path,
            --speculative-draft-attention-backend, the optional step/top-k options and
            --speculative-draft-window-size (the draft's sliding window, when the plan has one).
            drafter=False removes every flag in DRAFTER_FLAGS (and its value), whatever the plan holds.
  extra     `extra_args` go last, verbatim (SGLang's argparse lets a later flag win).
Complexity: O(number of arguments).

No list here says which flags SGLang accepts: SGLang 0.5.23's own parser and resolution judge every
rendered command (`validation.py`, run by `ray-dspine check` and the tests).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ...capacity import CapacityPlan
from .config import SGLangEngineConfig

BOOLEAN_FLAGS = frozenset(
    {"--enable-metrics", "--enable-cache-report", "--disable-radix-cache", "--disable-overlap-schedule",
     "--enable-linear-replayssm-spec", "--trust-remote-code"}
)
DRAFTER_FLAGS = frozenset(
    {"--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-draft-tokens",
     "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-draft-attention-backend",
     "--speculative-draft-window-size", "--enable-linear-replayssm-spec"}
)
SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key"})
LOOPBACK = "127.0.0.1"


def without_flags(args: list[str], flags: frozenset[str]) -> list[str]:
    """Drop each flag in `flags` and, unless it is a boolean flag, the value after it."""
    out: list[str] = []
    skip_value = False
    for token in args:
        if skip_value:
            skip_value = False
            continue
        name = token.split("=", 1)[0]
        if name in flags:
            skip_value = "=" not in token and name not in BOOLEAN_FLAGS
            continue
        out.append(token)
    return out


def flags_of(command: list[str]) -> list[str]:
    """The `--flag` names of a command, in order (values and `--flag=value` suffixes dropped)."""
    return [token.split("=", 1)[0] for token in command if token.startswith("--")]


def redact(command: list[str]) -> list[str]:
    """The command with the values of secret flags replaced, for logs and receipts."""
    out: list[str] = []
    hide_next = False
    for token in command:
        name = token.split("=", 1)[0]
        if hide_next:
            out.append("<redacted>")
            hide_next = False
        elif name in SECRET_FLAGS and "=" in token:
            out.append(f"{name}=<redacted>")
        else:
            out.append(token)
            hide_next = name in SECRET_FLAGS
    return out


def render_command(
    config: SGLangEngineConfig,
    plan: CapacityPlan,
    *,
    model_dir: str | Path,
    draft_dir: str | Path | None,
    port: int,
    drafter: bool,
) -> list[str]:
    """The full argv of one launch; `drafter=False` is the autoregressive fallback."""
    python = config.python_executable or sys.executable
    command = [
        python, "-m", "sglang.launch_server",
        "--model-path", str(model_dir),
        "--served-model-name", config.served_model_name,
        "--host", LOOPBACK,
        "--port", str(port),
        "--dtype", config.dtype,
        "--attention-backend", config.attention_backend,
        "--linear-attn-backend", config.linear_attn_backend,
    ]  # fmt: skip
    if config.trust_remote_code:
        command.append("--trust-remote-code")
    if config.reasoning_parser:
        command += ["--reasoning-parser", config.reasoning_parser]
    if config.tool_call_parser:
        command += ["--tool-call-parser", config.tool_call_parser]
    command += ["--enable-metrics", "--enable-cache-report"]
    if not drafter:
        return command + without_flags(list(plan.sglang_args), DRAFTER_FLAGS) + list(config.extra_args)
    if config.speculative_algorithm is None or draft_dir is None or plan.speculative_num_draft_tokens <= 0:
        raise ValueError("drafter=True needs speculative_algorithm, a draft folder and a plan made with the draft")
    command += list(plan.sglang_args)
    command += ["--speculative-algorithm", config.speculative_algorithm, "--speculative-draft-model-path", str(draft_dir)]
    if config.draft_attention_backend is not None:
        command += ["--speculative-draft-attention-backend", config.draft_attention_backend]
    if config.speculative_num_steps is not None:
        command += ["--speculative-num-steps", str(config.speculative_num_steps)]
    if config.speculative_eagle_topk is not None:
        command += ["--speculative-eagle-topk", str(config.speculative_eagle_topk)]
    draft = config.capacity.draft
    if draft is not None and draft.draft_window_tokens is not None:
        command += ["--speculative-draft-window-size", str(draft.draft_window_tokens)]
    return command + list(config.extra_args)
