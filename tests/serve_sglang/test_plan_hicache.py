"""`ray-dspine plan` on an SGLang pool with HiCache in its extra_args: the host tier and its host memory."""

import json
from pathlib import Path

import yaml

from ray_dspine.cli import main

PROD_YAML = Path(__file__).resolve().parents[2] / "clusters" / "prod.yaml"


def with_hicache(tmp_path: Path, extra_args: list[str]) -> Path:
    config = yaml.safe_load(PROD_YAML.read_text())
    pool = config["applications"][0]["args"]["pools"][0]
    assert pool["name"] == "dspine-agent"
    pool["engine"]["extra_args"] = extra_args
    path = tmp_path / "prod-hicache.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_plan_prints_the_host_tier_and_its_host_memory(tmp_path, capsys):
    path = with_hicache(tmp_path, ["--enable-hierarchical-cache", "--hicache-write-policy", "write_back"])
    assert main(["plan", str(path)]) == 0
    out = capsys.readouterr().out
    # ratio 2 (SGLang's default): 2 x 463,360 device tokens = 926,720; KV 926,720 x 65,536 B = 56.6 GiB;
    # Mamba 2 x 215 slots x 146.8 MiB = 61.6 GiB; 118.2 GiB of host memory per GPU
    assert "hicache host tier     926,720 KV tokens; host memory KV 56.6 + Mamba 61.6 = 118.2 GiB per GPU" in out
    assert out.count("hicache host tier") == 1  # the other pools run without it
    assert main(["plan", str(path), "--json"]) == 0
    pools = json.loads(capsys.readouterr().out)["pools"]
    assert pools["dspine/dspine-agent"]["hicache_host"] == {
        "kv_tokens": 926_720, "kv_bytes": 2 * 463_360 * 65_536, "mamba_bytes": 2 * 215 * 153_944_064,
    }  # fmt: skip
    assert pools["dspine/dflash2"]["hicache_host"] is None
