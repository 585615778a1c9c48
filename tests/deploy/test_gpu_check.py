"""`ray-dspine gpu-check`: its rules on hand-made /server_info bodies, and end to end against a small stand-in
server launched through the replica's own supervisor (no GPU here; on a GPU node it runs SGLang itself)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from ray_dspine.capacity import plan_capacity, resolve_profile
from ray_dspine.config import AppConfig
from ray_dspine.config_io import read_serve_yaml
from ray_dspine.deploy.check import sglang_commands
from ray_dspine.deploy import gpu_check as gpu_check_module
from ray_dspine.deploy.gpu_check import (
    PreflightError,
    compare_with_plan,
    engine_configs,
    gpu_check,
    gpu_check_main,
    selected_pools,
    visible_gpus,
)
from ray_dspine.engines.sglang import launch_subprocess, render_command
from ray_dspine.engines.sglang.validation import target_hf_config

REPO = Path(__file__).resolve().parents[2]
PROD = REPO / "clusters" / "prod.yaml"
SERVER = REPO / "tests" / "sglang_double" / "supervisor_server.py"


def agent_pool():
    return AppConfig.model_validate(read_serve_yaml(PROD)["applications"][0]["args"]).pools[0]


def test_rule_g3_g4_against_the_plan():
    pool = agent_pool()
    plan = plan_capacity(pool.engine.capacity, resolve_profile(pool.engine.capacity))
    assert (plan.free_kv_tokens, plan.max_running_requests, plan.max_mamba_cache_size) == (463_360, 71, 215)
    sizes = {"max_running_requests": 71, "max_mamba_cache_size": 215}
    # 440,000 tokens (e.g. a CUDA context and a vision tower the plan does not count) is 0.950x: over 2% short
    short = compare_with_plan({"max_total_num_tokens": 440_000, **sizes}, plan, kv_tolerance=0.02)
    assert short["G3 memory"] == (False, "SGLang allocated 440,000 KV tokens, plan 463,360 (0.950x)")
    assert short["G4 sizes"] == (True, "max_running_requests 71 (plan 71), max_mamba_cache_size 215 (plan 215)")
    # 0.98 x 463,360 = 454,092.8: 454,093 passes at 2%, 454,092 does not
    assert compare_with_plan({"max_total_num_tokens": 454_093, **sizes}, plan, 0.02)["G3 memory"][0] is True
    assert compare_with_plan({"max_total_num_tokens": 454_092, **sizes}, plan, 0.02)["G3 memory"][0] is False
    other = compare_with_plan({"max_running_requests": 67, "max_mamba_cache_size": 202}, plan, 0.02)
    assert other["G3 memory"] == (False, "/server_info has no max_total_num_tokens")
    assert other["G4 sizes"][0] is False and "max_running_requests 67 (plan 71)" in other["G4 sizes"][1]


def test_the_fallback_config_renders_the_fallback_command():
    pool = agent_pool()
    (_, primary), (which, plain) = engine_configs(pool, dummy_weights=True)
    assert which == "fallback" and not plain.has_drafter
    assert primary.extra_args[-4:] == ["--load-format", "dummy", "--speculative-draft-load-format", "dummy"]
    assert plain.extra_args == ["--load-format", "dummy"]
    # dummy weights fetch no checkpoint: prod's target keeps its 5 config and tokenizer files of 16 (the 11
    # safetensors shards go), its drafter its config.json of 2
    assert [pin.path for pin in primary.target.files] == [
        "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"]
    assert [pin.path for pin in primary.draft.files] == ["config.json"] and plain.target == primary.target
    (real, _) = engine_configs(pool, dummy_weights=False)
    assert len(real[1].target.files) == 16 and len(real[1].draft.files) == 2
    _, fallback = sglang_commands(pool)
    plan = plan_capacity(plain.capacity, resolve_profile(plain.capacity))
    rendered = render_command(plain.model_copy(update={"extra_args": [], "python_executable": "python"}), plan,
                              model_dir=fallback[4], draft_dir=None, port=30000, drafter=False)  # fmt: skip
    assert rendered == fallback


def test_gpu_check_end_to_end(tmp_path, capsys):
    document = yaml.safe_load(PROD.read_text())
    pools = document["applications"][0]["args"]["pools"]
    agent = pools[0]
    folder = tmp_path / "model"
    folder.mkdir()
    shape = json.dumps(target_hf_config(agent_pool().engine.capacity)).encode()  # the shipped profile's shape
    (folder / "config.json").write_bytes(shape)
    pin = {"path": "config.json", "size_bytes": len(shape), "sha256": hashlib.sha256(shape).hexdigest()}
    agent["engine"]["target"] = {"uri": str(folder), "files": [pin]}
    agent["engine"]["draft"] = {"uri": str(folder), "files": [pin]}
    agent["engine"].update(log_dir=str(tmp_path / "logs"), health_poll_s=0.05, startup_timeout_s=60,
                           env={"SUPERVISOR_SERVER_KV_TOKENS": "463360"})  # fmt: skip
    document["applications"][0]["args"]["pools"] = [agent]
    document["applications"][0]["args"]["traffic"] = {
        "default_reasoning_level": "none", "rules": [{"reasoning_levels": ["none"], "pool": agent["name"]}]}
    document["applications"][0]["deployments"] = []
    config = tmp_path / "one-pool.yaml"
    config.write_text(yaml.safe_dump(document))

    async def launcher(command, env, log_path):
        return await launch_subprocess([sys.executable, str(SERVER), *command[3:]], env, log_path)

    lines: list[str] = []
    results = asyncio.run(gpu_check(config, pools=None, dummy_weights=False, kv_tolerance=0.02, launcher=launcher,
                                    out=lines.append))  # fmt: skip
    assert [(r.pool, r.which, r.passed) for r in results] == [("dspine-agent", "command", True),
                                                             ("dspine-agent", "fallback", False)]  # fmt: skip
    primary, fallback = results
    assert primary.checks["G2 drafter"] == (True, "probe: spec_verify_ct > 0")
    assert primary.checks["G3 memory"] == (True, "SGLang allocated 463,360 KV tokens, plan 463,360 (1.000x)")
    # the fallback plans 76 running requests and more KV (no draft weights): the same 463,360 is short of it
    assert fallback.checks["G3 memory"][0] is False
    assert fallback.checks["G4 sizes"] == (True, "max_running_requests 76 (plan 76), max_mamba_cache_size 228 (plan 228)")
    assert any(line.startswith("[dspine-agent] command: launching") for line in lines)


def test_preflight_refuses_before_any_launch(tmp_path):
    # the shipped prod config pins placeholders: 3 SGLang pools, each with a target (16 files) and a drafter (2 files)
    with pytest.raises(PreflightError) as refused:
        selected_pools(PROD, ["dflash2"])
    assert str(refused.value).splitlines()[:5] == [
        "artifact pins are placeholders, so nothing could be fetched:",
        "  dflash2 target: placeholder location 's3://replace-me-model-bucket/qwen3.8-27b/'",
        "  dflash2 target: 16 of 16 sha256 pins are placeholders",
        "  dflash2 draft: placeholder location 's3://replace-me-model-bucket/dflash2-qwen3.8-27b/'",
        "  dflash2 draft: 2 of 2 sha256 pins are placeholders",
    ]
    with pytest.raises(PreflightError, match=r"^--pool nope: no such SGLang pool in .*prod.yaml; its SGLang pools are "
                                             r"dspine-agent, dspine-reasoning, dflash2$"):
        selected_pools(PROD, ["nope", "dflash2"])
    with pytest.raises(PreflightError, match=r"local.yaml has no SGLang pool \(its pools run embedded\)"):
        selected_pools(REPO / "clusters" / "local.yaml", None)
    with pytest.raises(PreflightError, match=r"absent.yaml: no such file"):
        selected_pools(tmp_path / "absent.yaml", None)


def test_main_refuses_a_node_without_a_gpu_after_the_config_checks(tmp_path, capsys, monkeypatch):
    args = SimpleNamespace(config=str(PROD), pool=None, dummy_weights=True, kv_tolerance=0.02)
    assert gpu_check_main(args) == 2
    assert capsys.readouterr().err.startswith("ray-dspine gpu-check: artifact pins are placeholders")
    monkeypatch.setattr(gpu_check_module, "selected_pools", lambda path, names: [])
    monkeypatch.setattr(gpu_check_module, "visible_gpus", lambda: 0)
    assert gpu_check_main(args) == 2
    assert "no NVIDIA GPU on this node (`nvidia-smi -L` lists none)" in capsys.readouterr().err


def test_visible_gpus_counts_what_nvidia_smi_lists(tmp_path, monkeypatch):
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-1)'\necho 'GPU 1: NVIDIA H200 (UUID: GPU-2)'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert visible_gpus() == 2
    tool.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert visible_gpus() == 0
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert visible_gpus() == 0
