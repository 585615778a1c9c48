"""What the SGLang server double needs before SGLang's serving code can run in a process without a GPU.

Rules:
  modules   `torchvision` (PyPI has no CPU build that matches CPU torch 2.13) and `sgl_kernel` (CUDA-only)
            import as inert module doubles: SGLang imports them at module level for vision processors and
            kernels, and nothing the double runs calls into them. Every other package SGLang imports is the
            real one (the `contract` extra in pyproject.toml).
  parse     `sglang.srt.server_args.prepare_server_args(argv)`: SGLang's own argparse, so an unknown flag or a
            bad value exits 2 with SGLang's message, exactly as `python -m sglang.launch_server` does.
  publish   the two defaults of SGLang's `handle_missing_default_values` that the OpenAI layer reads are
            declared as that rule declares them (served model name and tokenizer path = the model path; the
            rule itself also picks the device, which needs an accelerator), then
            `RuntimeContext.set_server_args` projects the config bags
            (`get_serving()`, `get_model()`, `get_spec()`, ...) from the parsed arguments, which is what
            `publish()` does after `ServerArgs.resolve_once()`. The full resolution pipeline is not run here:
            it reads the checkpoint's config.json and queries the GPU (the launch-command tests run it
            against the planner's config, engines/sglang/judge.py).
  plugins   SGLang's `load_plugins()` runs as at launch; a --speculative-algorithm that no installed plugin
            registered (DSpine's package is not installed here) is registered with SGLang's own
            `SpeculativeAlgorithm.register` and a worker factory that raises: the scheduler double does the
            speculative work, so nothing builds a worker, but SGLang's config code looks the name up.
  events    SGLANG_DOUBLE_EVENTS=path appends one JSON line per event ({"pid", "event", ...}).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from ray_dspine.engines.module_stand_ins import install_module_stand_ins


def install_module_doubles() -> None:
    """Rule `modules`: the inert modules SGLang's judge of our launch commands uses too (module_stand_ins.py)."""
    install_module_stand_ins()


def parse(argv: list[str]):
    """Rule `parse`: SGLang's ServerArgs for `argv` (SystemExit 2 on a bad command line)."""
    from sglang.srt.server_args import prepare_server_args

    return prepare_server_args(list(argv))


def register_algorithm(server_args) -> str | None:
    """Rule `plugins`; returns the name when it had to be registered here, else None."""
    from sglang.srt.plugins import load_plugins
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    load_plugins()
    name = server_args.speculative_algorithm
    if name is None:
        return None
    try:
        SpeculativeAlgorithm.from_string(name)
        return None
    except ValueError:
        SpeculativeAlgorithm.register(name.upper())(_no_worker)
        return name.upper()


def _no_worker(server_args: Any) -> Any:
    raise RuntimeError("the SGLang server double builds no speculative worker")


def publish(server_args) -> None:
    """Rule `publish`."""
    from sglang.srt.arg_groups.overrides import declare_resolution
    from sglang.srt.runtime_context import get_context

    defaults = {name: server_args.model_path for name in ("served_model_name", "tokenizer_path")
                if getattr(server_args, name) is None}  # fmt: skip
    if defaults:
        declare_resolution(server_args, "_handle_missing_default_values", **defaults)
    get_context().set_server_args(server_args)


_EVENTS_LOCK = threading.Lock()


def event(**fields: Any) -> None:
    """Rule `events`."""
    path = os.environ.get("SGLANG_DOUBLE_EVENTS")
    if path:
        with _EVENTS_LOCK, open(path, "a") as sink:
            sink.write(json.dumps({"pid": os.getpid(), **fields}) + "\n")


def env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))
