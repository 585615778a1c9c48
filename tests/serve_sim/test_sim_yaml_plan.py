"""`ray-dspine plan` on clusters/sim.yaml: each pool's H200 capacity, and a variant that cannot fit."""

from pathlib import Path

import yaml

from ray_dspine.cli import main

SIM_YAML = Path(__file__).resolve().parents[2] / "clusters" / "sim.yaml"


def test_plan_prints_each_pools_capacity(capsys):
    assert main(["plan", str(SIM_YAML)]) == 0
    out = capsys.readouterr().out
    # H200 (143,771 MiB) x 0.85 = 119.3 GiB; weights 50.1 + draft 3.8 GiB and the 100 MiB multimodal reserve
    # leave 65.4 GiB; ReplaySSM keeps no per-draft snapshots, so Mamba gets 215 slots of 146.8 MiB -> 71
    # running requests for both drafters. KV: a ring for DSpine's 8,192-token draft window would take
    # 71 x 8,192 x 10,240 B = 5.5 GiB, more than one draft entry per pooled token, so both keep draft KV per
    # token: 463,360 tokens of 65,536 + 10,240 B (after 216 state slots and 72 ReplaySSM rings).
    assert "pool dspine" in out and "pool dflash2" in out
    assert out.count("free KV tokens        463,360") == 2
    assert out.count("max running requests  71") == 2


def test_plan_refuses_a_pool_with_more_context_than_its_gpu_holds(tmp_path, capsys):
    config = yaml.safe_load(SIM_YAML.read_text())
    pool = config["applications"][0]["args"]["pools"][0]
    assert pool["name"] == "dspine"
    pool["engine"]["capacity"]["context_length_tokens"] = 1_048_576  # 1M tokens; the H200 holds 463,360
    broken = tmp_path / "sim-broken.yaml"
    broken.write_text(yaml.safe_dump(config))
    assert main(["plan", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "dspine does not fit on H200 x1" in err
    assert "rest 65.4 GiB per GPU" in err  # the arithmetic up to the step that failed
    assert "463,360 tokens < context 1,048,576 tokens" in err
    assert "dflash2" not in err  # the other pool still fits
