"""clusters/prod.yaml and clusters/prod-h100.yaml: Ray's schema, our AppConfig, and the planner agree."""

import pytest
from deploy_helpers import PROD, PROD_H100, load
from ray.serve.schema import ServeDeploySchema

from ray_dspine.autoscale.config import CostAutoscalingConfig
from ray_dspine.capacity import CapacityError
from ray_dspine.config_io import load_app_configs
from ray_dspine.deploy.check import COST_POLICY, check_config
from ray_dspine.pools import plan_pool

CONFIGS = {"h200": PROD, "h100": PROD_H100}


@pytest.fixture(params=sorted(CONFIGS))
def variant(request):
    return request.param


def pools_of(path):
    [(_, config)] = load_app_configs(path)
    return config


def test_ray_schema_accepts_both(variant):
    schema = ServeDeploySchema.model_validate(load(CONFIGS[variant]))
    assert [app.name for app in schema.applications] == ["dspine"]
    assert schema.applications[0].import_path == "ray_dspine.serve.app:build_app"


def test_pools_arms_and_drafters(variant):
    config = pools_of(CONFIGS[variant])
    by_name = {pool.name: pool for pool in config.pools}
    assert sorted(by_name) == ["dflash2", "dspine-agent", "dspine-reasoning"]
    for name, algorithm, tokens in (("dspine-agent", "DSPINE", 16), ("dspine-reasoning", "DSPINE", 16),
                                    ("dflash2", "DFLASH", 8)):  # fmt: skip
        engine = by_name[name].engine
        assert engine.kind == "sglang" and engine.speculative_algorithm == algorithm
        assert engine.capacity.draft.speculative_num_draft_tokens == tokens
        assert engine.target.uri.startswith("s3://") and engine.draft.uri.startswith("s3://")
        assert by_name[name].deployment.router.policy == "headroom" and by_name[name].gpu_hour_usd > 0
    rules = {tuple(rule.reasoning_levels): rule for rule in config.traffic.rules}
    assert rules[("none", "low", "medium")].pool == "dspine-agent"
    assert rules[("high", "xhigh")].pool == "dspine-reasoning"
    for rule in rules.values():
        assert [(arm.name, arm.pool, arm.share) for arm in rule.arms] == [("dflash2", "dflash2", 0.1)]
    # the reasoning pool holds the longer context; the arm serves both rules, so it holds it too
    assert by_name["dspine-agent"].engine.capacity.context_length_tokens == 131_072
    assert by_name["dspine-reasoning"].engine.capacity.context_length_tokens == 262_144
    assert by_name["dflash2"].engine.capacity.context_length_tokens == 262_144


def test_every_pool_fits_its_gpu_and_reserves_its_gpus(variant):
    expected = {"h200": ("H200", 1, 71, 463_360), "h100": ("H100", 2, 89, 575_853)}[variant]
    for pool in pools_of(CONFIGS[variant]).pools:
        plan = plan_pool(pool)
        assert (plan.gpu, plan.tensor_parallel_size, plan.max_running_requests, plan.free_kv_tokens) == expected
        assert pool.deployment.num_gpus == plan.tensor_parallel_size
        assert plan.free_kv_tokens >= pool.engine.capacity.context_length_tokens


def test_rule_h100_needs_tensor_parallel_two():
    # at TP=1: 79.6 GiB x 0.85 = 67.7 GiB static - 53.9 GiB weights - 100 MiB leaves KV for 95,686 tokens < 131,072
    for pool in pools_of(PROD_H100).pools:
        capacity = pool.engine.capacity.model_copy(update={"tensor_parallel_size": 1})
        single = pool.model_copy(update={"engine": pool.engine.model_copy(update={"capacity": capacity})})
        with pytest.raises(CapacityError, match=r"= 95,686 tokens < context"):
            plan_pool(single)


def test_autoscaling_uses_the_cost_policy_with_the_planned_replica(variant):
    document = load(CONFIGS[variant])
    config = pools_of(CONFIGS[variant])
    overrides = {entry["name"]: entry for entry in document["applications"][0]["deployments"]}
    for pool in config.pools:
        autoscaling = overrides[f"pool-{pool.name}"]["autoscaling_config"]
        assert autoscaling["policy"]["policy_function"] == COST_POLICY
        assert 1 <= autoscaling["min_replicas"] <= autoscaling["max_replicas"]
        assert autoscaling["upscale_delay_s"] == autoscaling["downscale_delay_s"] == 0  # the policy keeps its own
        params = CostAutoscalingConfig.model_validate(autoscaling["policy"]["policy_kwargs"])
        plan = plan_pool(pool)
        assert params.gpu_hour_usd == pool.gpu_hour_usd and params.gpus_per_replica == pool.deployment.num_gpus
        assert params.capacity.max_running_requests == plan.max_running_requests
        assert params.capacity.total_kv_tokens == plan.free_kv_tokens
        assert params.capacity.draft_tokens == pool.engine.capacity.draft.speculative_num_draft_tokens


def test_check_passes_and_flags_every_placeholder(variant):
    report = check_config(CONFIGS[variant])
    assert report.errors == []
    placeholders = [w for w in report.warnings if "placeholder" in w.message]
    assert len(placeholders) == 12  # three pools x (target, draft) x (uri, files)
    # and, from SGLang's judge, for each of the two DSpine pools: DSPINE is not registered here (Tencent's
    # package is not installed on this machine) and SGLang's warning that the draft window is the plugin's
    sglang = [w.message for w in report.warnings if w not in placeholders]
    assert len(sglang) == 4
    assert sum("does not know DSPINE" in m for m in sglang) == 2
    assert sum("--speculative-draft-window-size has no effect with speculative_algorithm=DSPINE" in m for m in sglang) == 2
    assert not report.passed(strict=True)


def test_files_embed_verbatim(variant):
    text = CONFIGS[variant].read_text(encoding="utf-8")
    assert "\t" not in text and text.endswith("\n") and not text.endswith("\n\n")
    assert all(line == line.rstrip() for line in text.splitlines())
