"""Have the installed SGLang judge a rendered launch command (judge.py runs in a child interpreter).

Rules:
  argv      the command after `-m sglang.launch_server`; `--model-path` and
            `--speculative-draft-model-path` are swapped for scratch folders that hold the target's and
            drafter's `config.json` (the artifact's own file when given, else the shape the planner used),
            because the pinned weights live on the GPU node, not here.
  target    the real config.json at `capacity.target_config_path`, else the shipped profile's JSON less
            its `name` / `assumption` keys (the planner reads the same file).
  draft     built from the pool's DraftConfig and the target's text config (`draft_hf_config`): Qwen3
            layers of the planner's draft shape; DFLASH names `DFlashDraftModel` with `dflash_config.
            block_size` = speculative_num_draft_tokens (what SGLang's DFLASH worker reads); DSPINE names
            `DSpineDraftModel` with a top-level `block_size` (ASSUMED: the plugin's checkpoint config is
            not public), any other algorithm `<ALGO>DraftModel`.
  gpu       the pool's GPU (GPU_SPECS: name, memory, compute capability) with count = tensor parallel size.
  stand-in  `--speculative-algorithm` names outside SGLang's built-ins are stood in unless `strict`, and the
            verdict says whether the installed SGLang knew them.
  missing   no SGLang importable by `python` -> Verdict(stage="import"), never a pass.
  memo      a verdict is a function of (interpreter, PYTHONPATH, strict, command, capacity, algorithm), so
            one process judges each such key once; a judge that could not run is never remembered.
Complexity: one child interpreter per command (~10-20 s on 2 cores: SGLang's import dominates).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ...capacity import GPU_SPECS, CapacityConfig, DraftConfig

JUDGE_MODULE = "ray_dspine.engines.sglang.judge"
PINNED_SGLANG = "0.5.23"
JUDGE_TIMEOUT_S = 300.0
_VERDICTS: dict[str, Verdict] = {}  # per process: SGLang's verdict depends only on the key's inputs
DRAFT_ARCHITECTURES = {"DFLASH": "DFlashDraftModel", "DSPINE": "DSpineDraftModel"}  # DSpine's: ASSUMED
BUILTIN_ALGORITHMS = frozenset({"DFLASH", "UNO", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM"})


class Verdict(BaseModel):
    """What SGLang said about one command (judge.py's JSON)."""

    model_config = ConfigDict(extra="ignore")

    ok: bool
    stage: Literal["import", "plugins", "parse", "resolve", "resolved", "judge"] = Field(
        description="The last stage reached; `resolved` when SGLang accepted the command."
    )
    error: str | None = Field(default=None, description="SGLang's own message when it refused the command.")
    where: str | None = Field(default=None, description="The SGLang source line that raised, when known.")
    sglang_version: str | None = None
    plugins: list[str] = Field(default_factory=list, description="Distributions in the sglang.srt.plugins group.")
    algorithms: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per --speculative-algorithm: known to SGLang, built in or a plugin's."
    )
    stand_ins: list[str] = Field(default_factory=list, description="Algorithms registered by a stand-in.")
    device_queries: dict[str, int] = Field(default_factory=dict, description="GPU queries the stand-in answered.")
    resolved: dict[str, Any] = Field(default_factory=dict, description="Selected fields after resolution.")
    warnings: list[str] = Field(default_factory=list, description="What SGLang logged at WARNING or worse.")

    def summary(self) -> str:
        """One line: `validated by sglang 0.5.23: ok` or SGLang's refusal."""
        version = self.sglang_version or "?"
        if self.ok:
            return f"validated by sglang {version}: ok"
        if self.stage == "import":
            return f"not validated: sglang could not be imported ({self.error}); install it with scripts/setup"
        return f"rejected by sglang {version} ({self.stage}): {self.error}"


def launch_arguments(command: list[str]) -> list[str]:
    """The arguments after `-m sglang.launch_server` (or after `sglang serve`)."""
    for position, token in enumerate(command):
        if token == "sglang.launch_server" and position > 0 and command[position - 1] == "-m":
            return list(command[position + 1 :])
        if token == "serve" and position > 0 and command[position - 1].endswith("sglang"):
            return list(command[position + 1 :])
    raise ValueError("not an SGLang launch command: expected `python -m sglang.launch_server ...`")


def target_hf_config(capacity: CapacityConfig) -> dict[str, Any]:
    """The target's config.json as a mapping (rule `target`)."""
    if capacity.target_config_path is not None:
        path = Path(capacity.target_config_path)
        return json.loads((path / "config.json" if path.is_dir() else path).read_text(encoding="utf-8"))
    entry = resources.files("ray_dspine.capacity").joinpath("profiles", f"{capacity.target_profile}.json")
    shipped = json.loads(entry.read_text(encoding="utf-8"))
    return {key: value for key, value in shipped.items() if key not in ("name", "assumption")}


def draft_hf_config(draft: DraftConfig, algorithm: str, target: dict[str, Any]) -> dict[str, Any]:
    """The drafter's config.json (rule `draft`)."""
    text = target.get("text_config", target)
    config: dict[str, Any] = {
        "model_type": "qwen3",
        "num_hidden_layers": draft.draft_num_layers,
        "hidden_size": text["hidden_size"],
        "intermediate_size": text["intermediate_size"],
        "num_attention_heads": max(draft.draft_kv_heads, text["hidden_size"] // draft.draft_head_dim),
        "num_key_value_heads": draft.draft_kv_heads,
        "head_dim": draft.draft_head_dim,
        "vocab_size": text["vocab_size"],
        "max_position_embeddings": text.get("max_position_embeddings", 262_144),
        "rms_norm_eps": 1e-6,
        "torch_dtype": "bfloat16",
    }
    name = algorithm.upper()
    config["architectures"] = [DRAFT_ARCHITECTURES.get(name, f"{name}DraftModel")]
    if name == "DFLASH":
        config["dflash_config"] = {"block_size": draft.speculative_num_draft_tokens}
    else:
        config["block_size"] = draft.speculative_num_draft_tokens
    return config


def gpu_of(capacity: CapacityConfig) -> dict[str, Any]:
    """The stand-in GPU's answers (rule `gpu`)."""
    spec = GPU_SPECS.get(capacity.gpu)
    memory_gb = capacity.resolved_gpu_memory_gb()
    capability = spec.compute_capability if spec is not None else (9, 0)
    name = spec.device_name if spec is not None else capacity.gpu
    return {"name": name, "memory_bytes": int(memory_gb * (1 << 30)), "capability": list(capability),
            "count": capacity.tensor_parallel_size}  # fmt: skip


def _swap(argv: list[str], flag: str, value: str) -> list[str]:
    out = list(argv)
    for position, token in enumerate(out[:-1]):
        if token == flag:
            out[position + 1] = value
    return out


def validate_command(
    command: list[str],
    capacity: CapacityConfig,
    *,
    algorithm: str | None,
    python: str | None = None,
    strict: bool = False,
    env: dict[str, str] | None = None,
    timeout_s: float = JUDGE_TIMEOUT_S,
) -> Verdict:
    """SGLang's verdict on one command (see validate_commands)."""
    return validate_commands([(command, capacity, algorithm)], python=python, strict=strict, env=env,
                             timeout_s=timeout_s)[0]  # fmt: skip


def validate_commands(
    commands: list[tuple[list[str], CapacityConfig, str | None]],
    *,
    python: str | None = None,
    strict: bool = False,
    env: dict[str, str] | None = None,
    timeout_s: float = JUDGE_TIMEOUT_S,
) -> list[Verdict]:
    """Run judge.py once over `(command, capacity, algorithm)` triples in `python` (default: this
    interpreter); one verdict per command, in order."""
    python = python or sys.executable
    scope = json.dumps([python, strict, (env or os.environ).get("PYTHONPATH", "")])
    keys = [json.dumps([scope, command, capacity.model_dump(mode="json"), algorithm])
            for command, capacity, algorithm in commands]  # fmt: skip
    found = {key: _VERDICTS[key] for key in keys if key in _VERDICTS}
    todo = [index for index, key in enumerate(keys) if key not in found]
    if todo:
        with tempfile.TemporaryDirectory(prefix="ray-dspine-judge-") as scratch:
            requests = [_request(*commands[index], strict, Path(scratch, str(index))) for index in todo]
            for index, verdict in zip(todo, run_judge(requests, python=python, env=env, timeout_s=timeout_s)):
                found[keys[index]] = verdict
                if verdict.stage not in ("import", "judge"):  # never remember a judge that could not run
                    _VERDICTS[keys[index]] = verdict
    return [found[key] for key in keys]


def _request(command: list[str], capacity: CapacityConfig, algorithm: str | None, strict: bool, folder: Path) -> dict:
    """The judge's request for one command, with its model folders written under `folder` (rule `argv`)."""
    argv = launch_arguments(command)
    target = target_hf_config(capacity)
    target_dir = folder / "target"
    target_dir.mkdir(parents=True)
    (target_dir / "config.json").write_text(json.dumps(target), encoding="utf-8")
    argv = _swap(argv, "--model-path", str(target_dir))
    if "--speculative-draft-model-path" in argv:
        if capacity.draft is None or algorithm is None:
            raise ValueError("a command with a draft model path needs capacity.draft and the algorithm")
        draft_dir = folder / "draft"
        draft_dir.mkdir()
        (draft_dir / "config.json").write_text(json.dumps(draft_hf_config(capacity.draft, algorithm, target)))
        argv = _swap(argv, "--speculative-draft-model-path", str(draft_dir))
    stand_ins = [] if strict or algorithm is None or algorithm.upper() in BUILTIN_ALGORITHMS else [algorithm]
    return {"argv": argv, "gpu": gpu_of(capacity), "stand_in_algorithms": stand_ins}


def run_judge(
    requests: list[dict[str, Any]], *, python: str, env: dict[str, str] | None, timeout_s: float
) -> list[Verdict]:
    def failed(stage: str, error: str) -> list[Verdict]:
        return [Verdict(ok=False, stage=stage, error=error) for _ in requests]

    try:
        done = subprocess.run(
            [python, "-m", JUDGE_MODULE], input=json.dumps({"commands": requests}), capture_output=True, text=True,
            timeout=timeout_s, env=env,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return failed("judge", f"SGLang's validation did not finish within {timeout_s:.0f} s")
    except OSError as exc:
        return failed("import", f"cannot run {python}: {exc}")
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"verdicts"')]
    if not lines:
        tail = (done.stderr or "").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return failed("import", tail[0])
    return [Verdict.model_validate(item) for item in json.loads(lines[-1])["verdicts"]]
