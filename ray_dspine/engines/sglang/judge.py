"""SGLang 0.5.23 judges one launch command with its own code, on a machine without a GPU.

Run as `python -m ray_dspine.engines.sglang.judge` with one JSON object on stdin, `{"commands": [...]}`,
each `{"argv": [...launch_server arguments...], "gpu": {"name", "memory_bytes", "capability", "count"},
"stand_in_algorithms": ["DSPINE", ...]}`. It prints `{"verdicts": [...]}` (see validation.Verdict) and
exits 0, also when SGLang rejects a command; it exits 1 only when SGLang itself cannot be imported.
Commands are judged one after another in this process, each on a fresh ServerArgs, with the process
environment restored after each (resolution may export variables).

Rules (what `python -m sglang.launch_server ARGV` does before it touches a GPU, in its own order):
  plugins   `sglang.srt.plugins.load_plugins()`: every package registered under the `sglang.srt.plugins`
            entry point runs, so an out-of-tree algorithm (DSpine's `DSPINE`) is known iff its package
            is installed. `algorithms` reports, for each `--speculative-algorithm`, whether
            `SpeculativeAlgorithm.from_string` knows it and which distribution registered it.
  stand-in  A name listed in `stand_in_algorithms` that no plugin registered is registered here with
            SGLang's own `SpeculativeAlgorithm.register` and its default `CustomSpecAlgo` (the stand-in's
            worker factory raises), so the other rules can still be judged; the verdict says so.
  parse     `sglang.srt.server_args.prepare_server_args(argv)`: SGLang's argparse; an unknown flag or a bad
            value is SystemExit 2 with argparse's message ("sglang serve: error: ...").
  resolve   `ServerArgs.resolve_once()`: the resolution and validation pipeline
            (`sglang/srt/arg_groups/pipeline.py` and the `*_hook.py` rules it runs); any exception is a
            rejection, reported with its type and message.
  warnings  every WARNING (or worse) that SGLang logs while parsing and resolving is kept in `warnings`:
            SGLang warns rather than refuses for some settings it will ignore.
Doubles (only where the hardware or a GPU-only package is missing):
  device    torch.cuda answers from the pool's GPU (`gpu`): available, name, total memory, compute
            capability, device count = tensor parallel size; free memory = total. Every answered query is
            counted in `device_queries`, so the verdict shows which rules read the stand-in GPU.
  modules   GPU-only or CUDA-built packages that SGLang imports but no rule here executes (torchvision,
            sgl_kernel) import as inert modules where they are not installed (module_stand_ins.py).

`python -m ray_dspine.engines.sglang.judge --require-algorithm NAME [...]` is the image build's check:
after load_plugins(), SpeculativeAlgorithm.from_string(NAME) must succeed for every NAME (exit 0), else
it prints which are missing and exits 1. No device stand-in is used.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import os
import sys
import traceback
import types
from collections import Counter
from typing import Any

from ray_dspine.engines.module_stand_ins import install_module_stand_ins

RESOLVED_FIELDS = (
    "model_path", "trust_remote_code", "revision", "context_length", "tp_size", "mem_fraction_static",
    "max_running_requests", "max_mamba_cache_size", "mamba_radix_cache_strategy", "mamba_ssm_dtype",
    "disable_overlap_schedule", "disable_radix_cache", "page_size", "attention_backend", "linear_attn_backend",
    "speculative_algorithm", "speculative_num_draft_tokens", "speculative_num_steps", "speculative_eagle_topk",
    "speculative_draft_attention_backend", "speculative_draft_window_size", "enable_linear_replayssm_spec",
    "kv_cache_dtype", "enable_metrics", "enable_cache_report",
)  # fmt: skip


def install_device_stand_in(gpu: dict, queries: Counter) -> None:
    """torch.cuda answers as the pool's GPU; call after SGLang's modules are imported (they pick kernels at
    import time by what torch.cuda reports, and no kernel runs here)."""
    import torch

    total = int(gpu["memory_bytes"])
    major, minor = (int(x) for x in gpu["capability"])
    props = types.SimpleNamespace(
        name=gpu["name"], total_memory=total, major=major, minor=minor, multi_processor_count=132,
        uuid="GPU-stand-in", L2_cache_size=50 << 20,
    )  # fmt: skip

    def answer(name: str, value: Any):
        def query(*args: Any, **kwargs: Any) -> Any:
            queries[name] += 1
            return value

        return query

    torch.cuda.is_available = answer("is_available", True)
    torch.cuda.device_count = answer("device_count", int(gpu["count"]))
    torch.cuda.current_device = answer("current_device", 0)
    torch.cuda.get_device_name = answer("get_device_name", gpu["name"])
    torch.cuda.get_device_capability = answer("get_device_capability", (major, minor))
    torch.cuda.get_device_properties = answer("get_device_properties", props)
    torch.cuda.mem_get_info = answer("mem_get_info", (total, total))
    torch.version.cuda = "13.0"
    for name, module in list(sys.modules.items()):  # SGLang caches platform probes (lru_cache) at import
        if name.startswith("sglang"):
            for value in list(vars(module).values()):
                if isinstance(value, functools._lru_cache_wrapper):  # never getattr: lazy modules would import
                    value.cache_clear()


def _plugin_distributions() -> list[str]:
    """Distributions with an entry point in SGLang's general plugin group, as load_plugins() finds them."""
    from importlib.metadata import entry_points

    from sglang.srt.plugins import GENERAL_PLUGINS_GROUP

    return sorted({ep.dist.name if ep.dist else ep.value for ep in entry_points(group=GENERAL_PLUGINS_GROUP)})


# Warnings that only the device stand-in causes (there is no driver here), not the command.
STAND_IN_WARNINGS = ("nvidia-smi not found",)


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage().strip()
        if message and message not in self.messages and not message.startswith(STAND_IN_WARNINGS):
            self.messages.append(message)


_STOOD_IN: set[str] = set()


def judge(argv: list[str], gpu: dict, stand_in_algorithms: list[str]) -> dict:
    """The verdict for one argv (see the module docstring)."""
    import sglang
    from sglang.srt.arg_groups import pipeline  # noqa: F401  (imports every hook before the device stand-in)
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    verdict: dict[str, Any] = {"sglang_version": sglang.__version__, "ok": False, "stage": "plugins", "error": None,
                               "plugins": _plugin_distributions(), "algorithms": {}, "stand_ins": [],
                               "device_queries": {}, "resolved": {}, "warnings": []}  # fmt: skip
    BUILTIN_ALGORITHMS = {member.name for member in SpeculativeAlgorithm}
    queries: Counter = Counter()
    log, kept = io.StringIO(), _Kept()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log), _keep_warnings(kept):
        load_plugins()
        for position, token in enumerate(argv[:-1]):
            if token == "--speculative-algorithm":
                name = argv[position + 1].upper()
                if name in _STOOD_IN:
                    verdict["algorithms"][name] = {"known": False, "error": f"Unknown speculative algorithm name: {name}"}
                    verdict["stand_ins"].append(name)
                    continue
                try:
                    SpeculativeAlgorithm.from_string(name)
                    verdict["algorithms"][name] = {"known": True, "builtin": name in BUILTIN_ALGORITHMS}
                except ValueError as exc:
                    verdict["algorithms"][name] = {"known": False, "error": str(exc)}
                    if name in {a.upper() for a in stand_in_algorithms}:
                        SpeculativeAlgorithm.register(name)(_stand_in_worker_factory)
                        _STOOD_IN.add(name)
                        verdict["stand_ins"].append(name)
        install_device_stand_in(gpu, queries)
        verdict["stage"] = "parse"
        try:
            args = prepare_server_args(list(argv))
        except Exception as exc:  # a type parser that raised
            verdict["error"], verdict["where"] = f"{type(exc).__name__}: {exc}", _where(exc)
            verdict["device_queries"], verdict["warnings"] = dict(queries), kept.messages
            return verdict
        except SystemExit as exc:
            message = [line for line in log.getvalue().splitlines() if "error:" in line]
            verdict["error"] = message[-1] if message else f"argparse exited {exc.code}"
            verdict["device_queries"], verdict["warnings"] = dict(queries), kept.messages
            return verdict
        verdict["stage"] = "resolve"
        try:
            args.resolve_once()
        except Exception as exc:  # every exception of the pipeline is SGLang refusing the command
            verdict["error"] = f"{type(exc).__name__}: {exc}".strip()
            verdict["where"] = _where(exc)
            verdict["device_queries"], verdict["warnings"] = dict(queries), kept.messages
            return verdict
        resolved = args.resolved_dict()
    verdict["resolved"] = {key: _plain(resolved[key]) for key in RESOLVED_FIELDS if key in resolved}
    verdict["ok"], verdict["stage"], verdict["device_queries"] = True, "resolved", dict(queries)
    verdict["warnings"] = kept.messages
    return verdict


@contextlib.contextmanager
def _keep_warnings(handler: logging.Handler):
    """Route every logger's records to `handler` (SGLang's basicConfig(force=True) replaces root handlers)."""
    original = logging.Logger.callHandlers

    def call_handlers(self: logging.Logger, record: logging.LogRecord) -> None:
        if record.levelno >= handler.level:
            handler.handle(record)
        original(self, record)

    logging.Logger.callHandlers = call_handlers  # type: ignore[method-assign]
    try:
        yield
    finally:
        logging.Logger.callHandlers = original  # type: ignore[method-assign]


def _stand_in_worker_factory(server_args: Any) -> Any:
    raise RuntimeError("stand-in registration: this environment has no package that provides the algorithm")


def _where(exc: BaseException) -> str | None:
    """`file:line in function` of the innermost SGLang frame that raised."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if "/sglang/" in frame.filename]
    if not frames:
        return None
    frame = frames[-1]
    return f"sglang/{frame.filename.split('/sglang/', 1)[1]}:{frame.lineno} in {frame.name}"


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return str(value)


def require_algorithms(names: list[str]) -> int:
    """Exit status 0 when the installed SGLang knows every name after loading its plugins, else 1."""
    install_module_stand_ins()
    from sglang.srt.plugins import load_plugins
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    load_plugins()
    missing = []
    for name in names:
        try:
            print(f"{name}: {SpeculativeAlgorithm.from_string(name)!r}")
        except ValueError as exc:
            missing.append(f"{name} ({exc})")
    if missing:
        print(f"not registered with SGLang: {', '.join(missing)}; plugins found in sglang.srt.plugins: "
              f"{_plugin_distributions() or 'none'}", file=sys.stderr)  # fmt: skip
        return 1
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--require-algorithm"]:
        return require_algorithms(sys.argv[2:])
    request = json.loads(sys.stdin.read())
    stdout = sys.stdout
    try:
        install_module_stand_ins()
        import sglang  # noqa: F401
    except ImportError as exc:
        failed = {"ok": False, "stage": "import", "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps({"verdicts": [failed] * len(request["commands"])}), file=stdout)
        return 1
    verdicts = []
    for command in request["commands"]:
        saved = dict(os.environ)
        try:
            verdicts.append(judge(command["argv"], command["gpu"], command.get("stand_in_algorithms", [])))
        except Exception as exc:  # outside SGLang's own stages: a fault of this judge, never a pass
            verdicts.append({"ok": False, "stage": "judge", "error": f"{type(exc).__name__}: {exc}", "where": _where(exc)})
        finally:
            os.environ.clear()
            os.environ.update(saved)
    print(json.dumps({"verdicts": verdicts}), file=stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
