"""SGLang 0.5.23's own parser and resolution judge the launch commands we render (engines/sglang/judge.py).

Each judge run starts one interpreter that imports SGLang (~10 s), so each test batches its commands.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ray_dspine.config import AppConfig
from ray_dspine.config_io import read_serve_yaml
from ray_dspine.deploy.check import check_config, sglang_commands
from ray_dspine.deploy.check_cli import format_verdict
from ray_dspine.engines.sglang.validation import draft_hf_config, launch_arguments, validate_commands

REPO = Path(__file__).resolve().parents[2]
PROD = REPO / "clusters" / "prod.yaml"
PROD_H100 = REPO / "clusters" / "prod-h100.yaml"


def pools_of(path: Path):
    return {pool.name: pool for pool in AppConfig.model_validate(read_serve_yaml(path)["applications"][0]["args"]).pools}


@pytest.fixture(scope="module")
def prod_reports():
    return {path.name: check_config(path) for path in (PROD, PROD_H100)}


@pytest.mark.parametrize("name", ["prod.yaml", "prod-h100.yaml"])
def test_every_primary_and_fallback_command_is_accepted(prod_reports, name):
    report = prod_reports[name]
    assert not report.errors, [finding.format() for finding in report.errors]
    verdicts = [(pool.name, which, getattr(pool, f"{which}_verdict")) for pool in report.pools
                for which in ("command", "fallback")]  # fmt: skip
    assert len(verdicts) == 6  # three drafter pools, each with its autoregressive fallback
    for pool, which, verdict in verdicts:
        assert verdict is not None and verdict.ok, (pool, which, verdict)
        assert verdict.summary() == "validated by sglang 0.5.23: ok"
    resolved = {(pool, which): verdict.resolved for pool, which, verdict in verdicts}
    agent = resolved[("dspine-agent", "command")]
    # SGLang resolved what we rendered, not a default of its own: no_buffer with the overlap scheduler off
    assert agent["mamba_radix_cache_strategy"] == "no_buffer" and agent["disable_overlap_schedule"] is True
    assert agent["speculative_algorithm"] == "DSPINE" and agent["speculative_num_draft_tokens"] == 16
    assert agent["enable_linear_replayssm_spec"] is True and agent["trust_remote_code"] is True
    assert agent["speculative_draft_window_size"] == 8192
    plan = next(pool.plan for pool in report.pools if pool.name == "dspine-agent")
    assert agent["max_running_requests"] == plan.max_running_requests
    assert agent["max_mamba_cache_size"] == plan.max_mamba_cache_size
    fallback = resolved[("dspine-agent", "fallback")]
    assert fallback["speculative_algorithm"] is None and fallback["enable_linear_replayssm_spec"] is False
    dflash = resolved[("dflash2", "command")]
    assert dflash["speculative_algorithm"] == "DFLASH" and dflash["speculative_num_draft_tokens"] == 8
    # DFLASH under ReplaySSM resolves to a linear draft chain: one step, top-k 1 (SGLang's own resolution)
    assert dflash["speculative_num_steps"] == 1 and dflash["speculative_eagle_topk"] == 1


def test_check_reports_an_unregistered_plugin_algorithm_and_sglang_warnings(prod_reports):
    report = prod_reports["prod.yaml"]
    agent = next(pool for pool in report.pools if pool.name == "dspine-agent")
    assert agent.command_verdict.stand_ins == ["DSPINE"]  # no package here registers DSPINE
    assert agent.command_verdict.algorithms["DSPINE"]["known"] is False
    dflash = next(pool for pool in report.pools if pool.name == "dflash2")
    assert dflash.command_verdict.algorithms == {"DFLASH": {"known": True, "builtin": True}}
    warned = [finding.message for finding in report.warnings if "speculative_algorithm" in finding.path]
    assert len(warned) == 2 and all("does not know DSPINE" in message for message in warned)
    # SGLang says so itself: the window is honoured by built-in algorithms, not by a plugin's
    sglang_said = [finding.message for finding in report.warnings if "SGLang warned" in finding.message]
    assert any("--speculative-draft-window-size has no effect with speculative_algorithm=DSPINE" in message
               for message in sglang_said)  # fmt: skip
    text = format_verdict(agent.command_verdict)
    assert "validated by sglang 0.5.23: ok" in text and "DSPINE: NOT registered here" in text
    assert "GPU queries answered from the pool's GPU" in text


def test_the_old_flag_fails_check_with_sglangs_own_message(tmp_path):
    document = yaml.safe_load(PROD.read_text())
    engine = document["applications"][0]["args"]["pools"][0]["engine"]
    engine["extra_args"] = ["--mamba-scheduler-strategy", "no_buffer"]
    broken = tmp_path / "prod.yaml"
    broken.write_text(yaml.safe_dump(document))
    done = subprocess.run([sys.executable, "-m", "ray_dspine.cli", "check", str(broken)], capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 1
    message = "sglang serve: error: unrecognized arguments: --mamba-scheduler-strategy no_buffer"
    assert message in done.stdout and message in done.stderr  # under the command, and as the finding
    assert "rejected by sglang 0.5.23 (parse)" in done.stdout
    assert done.stdout.count("validated by sglang 0.5.23: ok") == 4  # the other two pools still pass


def test_sglang_rules_the_commands_had_to_meet():
    pools = pools_of(PROD)
    agent, dflash = pools["dspine-agent"], pools["dflash2"]
    command, fallback = sglang_commands(agent)
    dflash_command, _ = sglang_commands(dflash)
    overlap_on = [token for token in command if token != "--disable-overlap-schedule"]
    tree = command + ["--speculative-eagle-topk", "4"]
    cutedsl = command + ["--linear-attn-backend", "cutedsl"]
    short_window = dflash_command + ["--speculative-draft-window-size", "4"]
    cases = [
        (overlap_on, agent, "DSPINE"),
        (tree, agent, "DSPINE"),
        (cutedsl, agent, "DSPINE"),
        (short_window, dflash, "DFLASH"),
        (fallback, agent, None),
    ]
    verdicts = validate_commands([(argv, pool.engine.capacity, algorithm) for argv, pool, algorithm in cases])
    no_overlap, topk, backend, window, plain = verdicts
    assert no_overlap.stage == "resolve"
    assert no_overlap.error == ("AssertionError: no_buffer do not support overlap schedule. Try to set "
                                "disable_overlap_schedule=True.")  # fmt: skip
    assert no_overlap.where.startswith("sglang/srt/arg_groups/mamba_hook.py:") and "validate_mamba_no_buffer" in (
        no_overlap.where)
    assert topk.error.startswith("ValueError: --enable-linear-replayssm-spec requires a linear draft chain "
                                 "(--speculative-eagle-topk in {None, 1})")  # fmt: skip
    assert topk.error.endswith("Got --speculative-eagle-topk=4.")
    assert backend.error == ("ValueError: --enable-linear-replayssm-spec requires the triton or flashinfer "
                             "linear-attn decode backend, got --linear-attn-decode-backend='cutedsl'.")  # fmt: skip
    assert not window.ok and "window_size=4, block_size=8" in window.error
    assert plain.ok and plain.resolved["speculative_algorithm"] is None


def test_strict_check_does_not_stand_in_for_a_missing_plugin():
    agent = pools_of(PROD)["dspine-agent"]
    command, _ = sglang_commands(agent)
    [verdict] = validate_commands([(command, agent.engine.capacity, "DSPINE")], strict=True)
    assert not verdict.ok and verdict.stage == "resolve"
    assert verdict.error == "ValueError: Unknown speculative algorithm name: DSPINE"
    assert verdict.stand_ins == []


def test_a_plugin_registered_through_sglangs_entry_point_makes_dspine_resolve(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "dspine_test_plugin.py").write_text(
        "from sglang.srt.speculative.spec_info import SpeculativeAlgorithm\n\n\n"
        "def register():\n"
        "    @SpeculativeAlgorithm.register('DSPINE')\n"
        "    def _worker(server_args):\n"
        "        raise RuntimeError('test plugin: no worker')\n"
    )
    info = site / "dspine_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: dspine-test-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[sglang.srt.plugins]\ndspine = dspine_test_plugin:register\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(site)}
    agent = pools_of(PROD)["dspine-agent"]
    command, _ = sglang_commands(agent)
    [verdict] = validate_commands([(command, agent.engine.capacity, "DSPINE")], strict=True, env=env)
    assert verdict.ok, verdict
    assert verdict.plugins == ["dspine-test-plugin"]
    assert verdict.algorithms == {"DSPINE": {"known": True, "builtin": False}} and verdict.stand_ins == []
    # the image build's check: SGLang knows both algorithms once the plugin is installed, and says which not
    module = [sys.executable, "-m", "ray_dspine.engines.sglang.judge", "--require-algorithm", "DSPINE", "DFLASH"]
    assert subprocess.run(module, env=env, capture_output=True, timeout=300).returncode == 0
    missing = subprocess.run(module, capture_output=True, text=True, timeout=300)
    assert missing.returncode == 1
    assert "not registered with SGLang: DSPINE (Unknown speculative algorithm name: DSPINE)" in missing.stderr


def test_no_importable_sglang_is_an_error_never_a_pass():
    agent = pools_of(PROD)["dspine-agent"]
    command, _ = sglang_commands(agent)
    [verdict] = validate_commands([(command, agent.engine.capacity, "DSPINE")], python="/nonexistent/python")
    assert not verdict.ok and verdict.stage == "import"
    assert verdict.summary().startswith("not validated: sglang could not be imported")


def test_the_judge_sees_our_model_shape_not_the_node_paths():
    agent = pools_of(PROD)["dspine-agent"]
    command, _ = sglang_commands(agent)
    argv = launch_arguments(command)
    assert argv[:2] == ["--model-path", "/mnt/models/ray-dspine-artifacts/s3/replace-me-model-bucket/qwen3.8-27b"]
    target = {"text_config": {"hidden_size": 5120, "intermediate_size": 17408, "vocab_size": 248320}}
    draft = draft_hf_config(agent.engine.capacity.draft, "DSPINE", target)
    # 5 layers x 4 KV heads x 128 dims: the planner's 10,240 B/token draft cell (2 * 5 * 4 * 128 * 2 bytes)
    assert (draft["num_hidden_layers"], draft["num_key_value_heads"], draft["head_dim"]) == (5, 4, 128)
    assert draft["architectures"] == ["DSpineDraftModel"] and draft["block_size"] == 16
    dflash = draft_hf_config(pools_of(PROD)["dflash2"].engine.capacity.draft, "DFLASH", target)
    assert dflash["architectures"] == ["DFlashDraftModel"] and dflash["dflash_config"] == {"block_size": 8}
    with pytest.raises(ValueError, match="not an SGLang launch command"):
        launch_arguments(["python", "server.py"])
