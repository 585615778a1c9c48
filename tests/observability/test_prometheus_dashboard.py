"""Every Grafana panel's PromQL returns data from a real Prometheus scraping a real Ray Serve app.

Installs Debian's `prometheus` when it is missing (tests may run as root), starts a simulated-engine
Serve app in its own process (Ray token auth off, loopback only) and Prometheus on 127.0.0.1 with
observability/prometheus.yml's `ray` job (file-based discovery, as Ray documents) pointed at that app,
sends traffic (including one request the replica refuses), then polls every panel query for up to
90 s. A panel whose series the code does not export yet is listed by name in the failure.
"""

import json
import math
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from dashboard_queries import PROMETHEUS_CONFIG, load_dashboard, panel_queries
from free_ports import free_port
from prometheus_package import prometheus_tool

pytestmark = [pytest.mark.prometheus, pytest.mark.serve]

HERE = Path(__file__).resolve().parent
POLL_DEADLINE_S = 90.0


def stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@pytest.fixture(scope="module")
def serve_app():
    metrics_port, http_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, str(HERE / "sim_serve_app.py"), str(metrics_port), str(http_port)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        ready = threading.Event()
        threading.Thread(target=lambda: ready.set() if "READY" in process.stdout.readline() else None,
                         daemon=True).start()  # fmt: skip
        if not ready.wait(240):
            pytest.fail("the simulated Serve app did not start within 240 s")
        yield {"metrics_port": metrics_port, "url": f"http://127.0.0.1:{http_port}"}
    finally:
        stop(process)


def scrape_config(tmp_path: Path, metrics_port: int) -> Path:
    """observability/prometheus.yml's `ray` job, scraping every second, its discovery file naming our app."""
    shipped = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    ray_job = next(job for job in shipped["scrape_configs"] if job["job_name"] == "ray")
    discovery = tmp_path / "prom_metrics_service_discovery.json"
    # The format Ray's dashboard writes (ray/_private/metrics_agent.py, get_file_discovery_content).
    discovery.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": [f"127.0.0.1:{metrics_port}"]}]))
    ray_job["file_sd_configs"] = [{"files": [str(discovery)], "refresh_interval": "5s"}]
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": [ray_job]}
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def prometheus(serve_app, tmp_path_factory):
    folder = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    process = subprocess.Popen(
        [prometheus_tool("prometheus"), f"--config.file={scrape_config(folder, serve_app['metrics_port'])}",
         f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("Prometheus did not become ready within 30 s")
        yield url
    finally:
        stop(process)


def send_traffic(url: str, stop_event: threading.Event) -> None:
    """Chat requests from rotating sessions (both arms), and one the replica must refuse (too long)."""
    turn = 0
    with httpx.Client(base_url=url, timeout=60) as client:
        client.post("/v1/chat/completions", json={"model": "sim", "max_tokens": 1_000_000,
                                                  "messages": [{"role": "user", "content": "too long"}]})  # fmt: skip
        while not stop_event.is_set():
            for session in range(6):
                client.post(
                    "/v1/chat/completions",
                    json={"model": "sim", "max_tokens": 48, "stream": session % 2 == 0,
                          "messages": [{"role": "user", "content": f"turn {turn}: refactor this function " * 8}]},
                    headers={"x-session-id": f"session-{session}"},
                )  # fmt: skip
            turn += 1
            stop_event.wait(1.0)


def has_data(prometheus_url: str, expr: str) -> bool:
    response = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": expr}, timeout=10)
    body = response.json()
    assert body["status"] == "success", f"Prometheus rejected {expr!r}: {body}"
    values = [float(sample["value"][1]) for sample in body["data"]["result"]]
    return any(math.isfinite(value) for value in values)


def test_every_dashboard_panel_returns_data(serve_app, prometheus):
    queries = panel_queries(load_dashboard())
    stop_event = threading.Event()
    traffic = threading.Thread(target=send_traffic, args=(serve_app["url"], stop_event), daemon=True)
    traffic.start()
    missing = queries
    try:
        deadline = time.monotonic() + POLL_DEADLINE_S
        while missing and time.monotonic() < deadline:
            time.sleep(3)
            missing = [(title, ref, expr) for title, ref, expr in missing if not has_data(prometheus, expr)]
    finally:
        stop_event.set()
        traffic.join(60)
    up = httpx.get(f"{prometheus}/api/v1/query", params={"query": "up"}).json()["data"]["result"]
    assert up and all(sample["value"][1] == "1" for sample in up), f"Ray's metrics port was not scraped: {up}"
    report = "\n".join(f"  {title} [{ref}]: {expr}" for title, ref, expr in missing)
    assert not missing, f"{len(missing)} of {len(queries)} panel queries returned no data:\n{report}"
    # One replica behind our router: a session's first request is new, every later one stays on it.
    placed = httpx.get(f"{prometheus}/api/v1/query", params={
        "query": 'sum by (outcome, policy) (ray_dspine_routing_placements_total{pool="sim-dspine"})'}).json()
    outcomes = {(s["metric"]["outcome"], s["metric"]["policy"]) for s in placed["data"]["result"]}
    assert outcomes == {("new_session", "headroom"), ("stayed", "headroom")}, placed
    # The simulated engine reports none of SGLang's own gauges, so each replica derives them (serve/metrics.py,
    # G1-G3) from the same snapshot, in the same scrape, as the headroom gauges: the differences are exactly 0.
    for expr in [
        "ray_dspine_kv_token_usage - (1 - ray_dspine_kv_free_tokens / ray_dspine_kv_total_tokens)",
        "ray_dspine_mamba_usage - (1 - ray_dspine_state_free_slots / ray_dspine_state_total_slots)",
        "ray_dspine_spec_accept_length - ray_dspine_accept_length_ema",  # both arms run their drafter
    ]:
        result = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}).json()["data"]["result"]
        replicas = {sample["metric"]["replica"] for sample in result}
        assert len(replicas) == 2 and all(abs(float(s["value"][1])) < 1e-9 for s in result), (expr, result)
