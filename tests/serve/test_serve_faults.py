"""A real Ray Serve app on the simulated engine: a replica killed with SIGKILL mid-stream, a burst against
a small pool with client deadlines, and what the ingress's Prometheus output carries.

One private local cluster (127.0.0.1, token auth off, 2 CPUs, metrics exported on a free port every second)
serves a pool of 2 simulated replicas behind the headroom router (all traffic) and a pool "tight" of one
replica running 2 requests at once (reached with x-dspine-pool); the API key comes from the workers'
environment. Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from free_ports import free_port

from ray_dspine.config import AppConfig

pytestmark = pytest.mark.serve

APP_NAME = "dspine-faults"
REPO = Path(__file__).resolve().parents[2]
KEY_ENV = "DSPINE_FAULT_TEST_KEY"
KEY_CANARY = "KEYCANARY7f3a91"  # the API key itself
PROMPT_CANARY = "PROMPTCANARY52be0c"
MODEL = "sim"
END_WITHIN_S = 5.0  # a stream on the killed replica must end within this long of the kill
HEADERS = {"authorization": f"Bearer {KEY_CANARY}"}


def app_config() -> AppConfig:
    return AppConfig.model_validate({
        "server": {"served_model_name": MODEL, "api_key_env": KEY_ENV, "request_timeout_s": 120.0},
        "pools": [{
            "name": "tight",  # reached only through x-dspine-pool: the admission test's pool
            "engine": {"kind": "simulated", "drafter": "none", "time_scale": 2.0, "total_kv_tokens": 65_536,
                       "max_running_requests": 16},
            "deployment": {"num_replicas": 1, "num_cpus": 0.1, "max_ongoing_requests": 2, "max_queued_requests": 64,
                           "routing_stats_period_s": 0.5, "graceful_shutdown_timeout_s": 1.0,
                           "router": {"policy": "headroom"}},
        }, {
            "name": "sim",
            "engine": {"kind": "simulated", "drafter": "none", "time_scale": 2.0, "total_kv_tokens": 65_536,
                       "max_running_requests": 16},
            "deployment": {"num_replicas": 2, "num_cpus": 0.1, "max_ongoing_requests": 16,
                           "routing_stats_period_s": 0.5, "health_check_period_s": 2.0,
                           "health_check_timeout_s": 5.0, "graceful_shutdown_timeout_s": 1.0,
                           "router": {"policy": "headroom"}},
        }],
        "traffic": {"default_reasoning_level": "none",
                    "rules": [{"reasoning_levels": ["none", "low", "medium", "high", "xhigh"], "pool": "sim"}]},
    })  # fmt: skip


@pytest.fixture(scope="module")
def served():
    """{"url", "metrics_port"} of the app, once /health answers 200 (within 240 s); stopped after the module."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray import serve

    from ray_dspine.serve.app import build_app

    metrics_port, http_port = free_port(), free_port()
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, _metrics_export_port=metrics_port,
        _system_config={"metrics_report_interval_ms": 1000},
        runtime_env={"env_vars": {KEY_ENV: KEY_CANARY, "PYTHONPATH": str(REPO)}},
    )  # fmt: skip  -- never join another cluster
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": http_port})
        serve.run(build_app(app_config()), name=APP_NAME, route_prefix="/", blocking=False)
        url = f"http://127.0.0.1:{http_port}"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", headers=HEADERS, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        else:
            raise RuntimeError("the fault-test app did not become healthy within 240 s")
        yield {"url": url, "metrics_port": metrics_port}
    finally:
        serve.shutdown()
        ray.shutdown()


def body(text: str, max_tokens: int, stream: bool) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "stream": stream}


class OpenStream(threading.Thread):
    """One streaming request; records its replica, its events and when each arrived."""

    def __init__(self, url: str, index: int):
        super().__init__(daemon=True)
        self.url, self.index = url, index
        self.replica: str | None = None
        self.events: list[tuple[float, str]] = []
        self.started = threading.Event()
        self.stop = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        headers = {**HEADERS, "x-session-id": f"fault-{self.index}"}
        try:
            with httpx.stream("POST", f"{self.url}/v1/chat/completions", headers=headers,
                              json=body(f"stream {self.index} " * 40, 2000, True), timeout=60) as response:  # fmt: skip
                self.replica = response.headers.get("x-dspine-replica")
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        self.events.append((time.monotonic(), line[len("data: "):]))
                        self.started.set()
                    if self.stop.is_set():
                        return
        except httpx.HTTPError as exc:
            self.error = type(exc).__name__
        finally:
            self.started.set()


def replica_pids(wanted: set[str]) -> dict[str, int]:
    """replica id -> process id of the pool's live replicas named in `wanted`, from Ray's actor table as the
    drill's kill finds them (a replica actor's name ends with its id). A `describe` call through the router
    would go to the replica with the most headroom, which is never the busiest one."""
    from ray_dspine.drill.kill import RayKiller

    found = {actor.name.rsplit("#", 1)[-1]: actor.pid for actor in RayKiller("auto").find("sim")}
    return {replica: pid for replica, pid in found.items() if replica in wanted}


def test_a_killed_replica_ends_its_streams_with_an_error_and_the_pool_serves_on(served):
    url = served["url"]
    streams = [OpenStream(url, index) for index in range(4)]
    for stream in streams:
        stream.start()
    for stream in streams:
        assert stream.started.wait(60), "a stream sent no event within 60 s"
    time.sleep(0.5)  # a few chunks each
    assert all(s.replica for s in streams), [s.error for s in streams]
    by_replica: dict[str, list[OpenStream]] = {}
    for stream in streams:
        by_replica.setdefault(stream.replica, []).append(stream)
    victim = max(by_replica, key=lambda rid: len(by_replica[rid]))
    pids = replica_pids({victim})
    assert victim in pids, f"no live actor of the replica {victim}: {pids}"
    sent_before = {s.index: len(s.events) for s in by_replica[victim]}
    killed_at = time.monotonic()
    os.kill(pids[victim], signal.SIGKILL)  # a process of this test's own private cluster
    for stream in by_replica[victim]:
        stream.join(END_WITHIN_S + 5)
    try:
        for stream in by_replica[victim]:
            payloads = [payload for _, payload in stream.events]
            assert not stream.is_alive() and stream.error is None, (stream.index, stream.error, payloads[-3:])
            assert sent_before[stream.index] >= 1
            # ... content, then the error event, the terminal chunk, [DONE]
            assert payloads[-1] == "[DONE]", payloads[-3:]
            error = json.loads(payloads[-3])["error"]
            assert error["code"] == "replica_failed" and "stopped" in error["message"], error
            assert json.loads(payloads[-2])["choices"][0]["finish_reason"] == "error"
            ended_at = stream.events[-1][0]
            took = ended_at - killed_at
            assert took <= END_WITHIN_S, f"stream {stream.index} ended {took:.2f} s after the kill"
            print(f"stream {stream.index}: ended {took:.3f} s after the kill, "
                  f"{len(payloads) - 3} content events; {error['message']}")  # fmt: skip
        # a request sent after the kill is served, by the other replica or the replacement
        after = httpx.post(f"{url}/v1/chat/completions", headers=HEADERS, json=body("after the kill", 4, False),
                           timeout=60)  # fmt: skip
        assert after.status_code == 200, after.text
        assert after.headers["x-dspine-replica"] != victim
        assert after.json()["choices"][0]["finish_reason"] in ("stop", "length")
    finally:
        for stream in streams:
            stream.stop.set()
        for stream in streams:
            stream.join(35)


def scrape(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text


def test_metrics_never_carry_prompt_text_or_keys(served):
    url = served["url"]
    for index in range(3):
        text = f"{PROMPT_CANARY} please summarise {index}"
        answer = httpx.post(f"{url}/v1/chat/completions", headers=HEADERS, json=body(text, 4, index == 1), timeout=60)
        assert answer.status_code == 200, answer.text
    wrong_key = {"authorization": f"Bearer {KEY_CANARY}-{PROMPT_CANARY}"}
    refused = httpx.post(f"{url}/v1/chat/completions", headers=wrong_key, json=body(PROMPT_CANARY, 4, False), timeout=30)
    assert refused.status_code == 401
    # the canaries must also not appear via the session key derived from them
    session = {**HEADERS, "x-session-id": PROMPT_CANARY}
    assert httpx.post(f"{url}/v1/chat/completions", headers=session, json=body("x", 2, False), timeout=60).status_code == 200
    deadline = time.monotonic() + 60
    output = ""
    while time.monotonic() < deadline:
        output = scrape(served["metrics_port"])
        # the ingress's own request counter with the served requests: the scrape holds what they recorded
        if 'dspine_requests' in output and 'finish_reason="length"' in output:
            break
        time.sleep(1)
    assert "dspine_requests" in output and "dspine_ttft_s" in output, output[:2000]
    assert PROMPT_CANARY not in output
    assert KEY_CANARY not in output
    assert PROMPT_CANARY.lower() not in output.lower() and KEY_CANARY.lower() not in output.lower()


def test_a_burst_past_capacity_is_refused_at_once_with_retry_after_and_nothing_hangs(served):
    """After the pool is measured, a burst of 20 requests with a 3 s deadline: each one admitted ends before
    the deadline (200, or 504 just before it), the rest are refused at once (429) with Retry-After."""
    import concurrent.futures

    url = served["url"]
    tight = {**HEADERS, "x-dspine-pool": "tight"}
    for index in range(6):  # 6 completions (admission_min_completions is 4): the pool is measured
        warm = httpx.post(f"{url}/v1/chat/completions", headers=tight, json=body(f"warm {index}", 20, False), timeout=30)
        assert warm.status_code == 200, warm.text
    deadline_s, client_timeout_s = 3.0, 4.0

    def one(index: int):
        began = time.monotonic()
        try:
            answer = httpx.post(f"{url}/v1/chat/completions", headers={**tight, "x-dspine-deadline-ms": "3000"},
                                json=body(f"burst {index}", 20, False), timeout=client_timeout_s)  # fmt: skip
        except httpx.TimeoutException:
            return None, None, time.monotonic() - began
        return answer.status_code, answer.headers.get("retry-after"), time.monotonic() - began

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(one, range(20)))
    statuses = [status for status, _, _ in answers]
    print("burst statuses", sorted(statuses, key=str), "seconds",
          sorted(round(took, 2) for _, _, took in answers))  # fmt: skip
    assert None not in statuses, "a request hung past the client's timeout"
    assert set(statuses) <= {200, 429, 503, 504}, statuses
    assert statuses.count(200) >= 2 and statuses.count(429) >= 1, statuses
    for status, retry_after, took in answers:
        if status in (429, 503):
            assert retry_after is not None and int(retry_after) >= 1
        if status == 429:  # at once: the time is the proxy's and the ingress's, on a shared 2-core host
            assert took < 1.5, f"a refusal took {took:.2f} s"
        # the ingress counts the deadline from when it reads the request; the client's clock started earlier
        assert took < deadline_s + 1.0, f"an answer took {took:.2f} s, well past the 3 s deadline"
