"""`ray-dspine check`: one named test per rule of ray_dspine/deploy/check.py, plus the CLI."""

import argparse
import hashlib

from deploy_helpers import LOCAL, PROD, app_args, override, prod_document, write

from ray_dspine.artifacts import ArtifactRef
from ray_dspine.cli import build_parser
from ray_dspine.deploy import check_cli
from ray_dspine.deploy.check import check_config, sglang_commands
from ray_dspine.deploy.pins import is_placeholder_sha256, placeholder_findings
from ray_dspine.engines.sglang.args import DRAFTER_FLAGS, flags_of

POOL0 = "applications[0].args.pools[0]"


def main(argv):
    """`ray-dspine check ...` through this module's own registrar."""
    parser = argparse.ArgumentParser()
    check_cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def errors_at(report, path):
    return [f for f in report.errors if f.path == path]


def warnings_at(report, path):
    return [f for f in report.warnings if f.path == path]


def test_rule_e1_missing_file(tmp_path):
    report = check_config(tmp_path / "absent.yaml")
    assert [f.message for f in report.errors] == [f"{tmp_path / 'absent.yaml'}: no such file"]
    report = check_config(tmp_path)
    assert [f.message for f in report.errors] == [
        f"{tmp_path}: a folder, not a file; give a Serve YAML such as clusters/local.yaml"
    ]
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"applications: []\n\xac\xed\x00")  # 17 ASCII bytes, then one no UTF-8 text starts with
    report = check_config(binary)
    assert [f.message for f in report.errors] == [f"{binary}: not UTF-8 text (byte 17); give a Serve YAML file"]


def test_rule_e2_unknown_ray_keys_and_bad_autoscaling(tmp_path):
    doc = prod_document()
    doc["proxy_locaton"] = "EveryNode"  # misspelt: Ray alone would ignore it
    doc["http_options"]["port"] = "eighty"
    override(doc, "pool-dflash2")["autoscaling_config"]["min_replicas"] = 9  # > max_replicas 4
    report = check_config(write(tmp_path, doc))
    [typo] = errors_at(report, "proxy_locaton")
    assert "no top-level option" in typo.message and "proxy_location" in typo.fix
    [port] = errors_at(report, "http_options.port")
    assert "valid integer" in port.message
    [bounds] = errors_at(report, "applications[0].deployments[3].autoscaling_config")
    assert "max_replicas (4) must be greater than or equal to min_replicas (9)" in bounds.message


def test_rule_e3_our_config_names_the_field(tmp_path):
    doc = prod_document()
    app_args(doc)["pools"][0]["engine"]["capacity"]["mem_fraction_static"] = 1.5
    report = check_config(write(tmp_path, doc))
    [error] = report.errors
    assert error.path == f"{POOL0}.engine.capacity.mem_fraction_static"
    assert "less than 1" in error.message and error.fix == "lower the value below the bound"


def test_rule_e3_needs_one_of_our_applications(tmp_path):
    doc = prod_document()
    doc["applications"][0]["import_path"] = "other.module:app"
    assert [f.path for f in check_config(write(tmp_path, doc)).errors] == ["applications"]


def test_rule_e4_override_names_a_deployment(tmp_path):
    doc = prod_document()
    override(doc, "pool-dflash2")["name"] = "dflash2"  # the deployment is pool-dflash2
    [error] = check_config(write(tmp_path, doc)).errors
    assert error.path == "applications[0].deployments[3].name" and "pool-dflash2" in error.fix


def test_rule_e5_capacity_refusal_carries_the_arithmetic(tmp_path):
    doc = prod_document()
    app_args(doc)["pools"][0]["engine"]["capacity"]["gpu"] = "H100"  # TP=1 on 80 GB
    report = check_config(write(tmp_path, doc))
    [error] = errors_at(report, f"{POOL0}.engine.capacity")
    assert "dspine-agent does not fit on H100 x1" in error.message and "raise tensor_parallel_size" in error.message
    assert [pool.name for pool in report.pools] == ["dspine-reasoning", "dflash2"]


def test_rule_e6_gpus_match_tensor_parallelism(tmp_path):
    doc = prod_document()
    app_args(doc)["pools"][1]["deployment"]["num_gpus"] = 2
    [error] = check_config(write(tmp_path, doc)).errors
    assert error.path == "applications[0].args.pools[1].deployment.num_gpus"
    assert "tensor_parallel_size 1" in error.message and error.fix.startswith("set num_gpus: 1")
    override(doc, "pool-dspine-reasoning")["ray_actor_options"] = {"num_gpus": 1}  # the override wins
    assert check_config(write(tmp_path, doc)).errors == []


def test_rule_e7_policy_kwargs(tmp_path):
    doc = prod_document()
    del override(doc, "pool-dspine-agent")["autoscaling_config"]["policy"]["policy_kwargs"]["slo"]
    [error] = check_config(write(tmp_path, doc)).errors
    assert error.path == "applications[0].deployments[1].autoscaling_config.policy.policy_kwargs.slo"
    assert error.fix == "add this field"


def test_rule_w1_placeholder_pins():
    assert is_placeholder_sha256("0" * 64) and is_placeholder_sha256("f" * 64)
    assert not is_placeholder_sha256(hashlib.sha256(b"config").hexdigest())
    ref = ArtifactRef(uri="s3://models/qwen/", files=[
        {"path": "a.json", "sha256": "0" * 64, "size_bytes": 0},
        {"path": "b.json", "sha256": hashlib.sha256(b"b").hexdigest(), "size_bytes": 1},
    ])  # fmt: skip
    [finding] = placeholder_findings(ref, "x")
    assert finding.path == "x.files" and finding.message == "1 of 2 sha256 pins are placeholders (a.json)"
    marked = ArtifactRef(uri="s3://replace-me-bucket/q/", files=[{"path": "a", "sha256": "1" * 64, "size_bytes": 0}])
    assert [f.path for f in placeholder_findings(marked, "y")] == ["y.uri", "y.files"]


def test_rule_w2_w3_policy_matches_pool_and_plan(tmp_path):
    doc = prod_document()
    kwargs = override(doc, "pool-dspine-agent")["autoscaling_config"]["policy"]["policy_kwargs"]
    kwargs["gpu_hour_usd"], kwargs["gpus_per_replica"] = 4.0, 2
    kwargs["capacity"] = dict(kwargs["capacity"], max_running_requests=64)
    report = check_config(write(tmp_path, doc))
    path = "applications[0].deployments[1].autoscaling_config.policy.policy_kwargs"
    assert "differs from the pool's gpu_hour_usd 3.5" in warnings_at(report, f"{path}.gpu_hour_usd")[0].message
    assert warnings_at(report, f"{path}.gpus_per_replica")[0].fix == "set gpus_per_replica: 1"
    [model] = warnings_at(report, f"{path}.capacity.max_running_requests")
    assert model.message == "64 differs from the plan's 71" and report.errors == []


def test_rule_w4_ongoing_below_running(tmp_path):
    doc = prod_document()
    app_args(doc)["pools"][0]["deployment"]["max_ongoing_requests"] = 8
    [warning] = warnings_at(check_config(write(tmp_path, doc)), f"{POOL0}.deployment.max_ongoing_requests")
    assert warning.message.startswith("8 is below the planned 71 running requests")


def test_sglang_commands_use_the_replica_cache_and_drop_drafter_flags_for_fallback():
    from ray_dspine.config_io import load_app_configs

    [(_, config)] = load_app_configs(PROD)
    command, fallback = sglang_commands(config.pool("dspine-agent"))
    assert command[:3] == ["python", "-m", "sglang.launch_server"]
    flags = dict(zip(command, command[1:]))
    assert flags["--model-path"] == "/mnt/models/ray-dspine-artifacts/s3/replace-me-model-bucket/qwen3.8-27b"
    assert flags["--speculative-draft-model-path"].endswith("/s3/replace-me-model-bucket/dspine-qwen3.8-27b")
    assert flags["--speculative-algorithm"] == "DSPINE" and flags["--speculative-num-draft-tokens"] == "16"
    assert flags["--port"] == "30000" and flags["--host"] == "127.0.0.1"
    assert not set(flags_of(fallback)) & DRAFTER_FLAGS


def test_cli_prod_exits_zero_and_prints_commands(capsys):
    assert main(["check", str(PROD)]) == 0
    out, err = capsys.readouterr()
    assert out.count("sglang command (drafter on):") == 3 and "--speculative-algorithm DFLASH" in out
    assert "OK (3 pools checked, 0 errors, 16 warnings)" in out  # 12 placeholders, 4 from SGLang's judge
    assert out.count("validated by sglang 0.5.23: ok") == 6
    assert "WARNING applications[0].args.pools[0].engine.target.files: 16 of 16 sha256 pins are placeholders" in err
    assert main(["check", "--strict", str(PROD)]) == 1


def test_cli_local_config_has_no_sglang_command(capsys):
    assert main(["check", str(LOCAL)]) == 0
    out, _ = capsys.readouterr()
    assert "pool spec: embedded engine, no capacity section" in out and "sglang command" not in out


def test_cli_broken_config_names_field_and_fix(tmp_path, capsys):
    doc = prod_document()
    app_args(doc)["pools"][2]["engine"]["speculative_algorithm"] = "EAGLE"
    assert main(["check", str(write(tmp_path, doc))]) == 1
    _, err = capsys.readouterr()
    field = "applications[0].args.pools[2].engine.speculative_algorithm"
    assert f"ERROR {field}: Input should be 'DSPINE' or 'DFLASH'" in err
    assert "fix: use one of the values the message lists" in err


def test_check_is_a_ray_dspine_command():
    # ray_dspine/cli.py REGISTRARS must hold (None, "ray_dspine.deploy.check_cli", "register")
    args = build_parser().parse_args(["check", str(PROD)])
    assert args.func is check_cli.check_main


def test_simulated_pool_gets_a_plan_but_no_sglang_command(tmp_path):
    doc = prod_document()
    pool = app_args(doc)["pools"][0]
    pool["engine"] = {"kind": "simulated", "drafter": "dspine", "capacity": pool["engine"]["capacity"]}
    pool["deployment"]["num_gpus"] = 0
    report = check_config(write(tmp_path, doc))
    assert report.errors == []
    simulated = report.pools[0]
    assert simulated.engine_kind == "simulated" and simulated.plan.max_running_requests == 71
    assert simulated.command is None and simulated.fallback_command is None


def test_every_shipped_serve_config_passes(capsys):
    configs = sorted((PROD.parent).glob("*.yaml"))
    assert PROD in configs and LOCAL in configs
    for config in configs:
        assert main(["check", str(config)]) == 0, f"{config.name}: {capsys.readouterr().err}"
