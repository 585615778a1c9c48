"""observability/prometheus.yml: Ray's documented discovery file, and SGLang ports matching clusters/prod.yaml."""

import subprocess

import yaml
from dashboard_queries import PROMETHEUS_CONFIG, REPO
from prometheus_package import prometheus_tool

from ray_dspine.config_io import load_app_configs


def jobs() -> dict:
    return {job["job_name"]: job for job in yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]}


def test_ray_job_reads_rays_service_discovery_file():
    assert jobs()["ray"]["file_sd_configs"][0]["files"] == ["/tmp/ray/prom_metrics_service_discovery.json"]
    assert jobs()["ray-static"]["static_configs"][0]["targets"] == ["127.0.0.1:8080"]  # template's metrics port


def test_sglang_targets_are_the_prod_pools_preferred_ports():
    [(_, config)] = load_app_configs(REPO / "clusters" / "prod.yaml")
    expected = {pool.name: f"127.0.0.1:{pool.engine.port}" for pool in config.pools}
    scraped = {entry["labels"]["pool"]: entry["targets"][0] for entry in jobs()["sglang"]["static_configs"]}
    assert scraped == expected and jobs()["sglang"]["metrics_path"] == "/metrics"


def test_promtool_accepts_it():
    promtool = prometheus_tool("promtool")
    result = subprocess.run([promtool, "check", "config", str(PROMETHEUS_CONFIG)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
