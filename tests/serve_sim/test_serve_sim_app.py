"""The routers inside a real local Serve app built by `build_app` from clusters/sim.yaml, over real HTTP.

The app runs in its own process (serve_sim_app.py: a private Ray cluster, 3 simulated DSpine replicas
behind the headroom router plus 1 DFlash2 replica), so it never meets another test module's cluster.
"""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from free_ports import free_port

from ray_dspine.config_io import load_app_configs
from ray_dspine.engines.simulated.profile import load_profile
from ray_dspine.engines.simulated.step_model import prefill_alone_ms
from ray_dspine.routing.traffic import assign
from ray_dspine.serve.server_timing import parse_server_timing

pytestmark = pytest.mark.serve

HERE = Path(__file__).resolve().parent
MODEL = "qwen3.8-27b"
READY_TIMEOUT_S = 80.0
BLOCK_CHARS = 2048  # the ingress's prefix block
TIME_SCALE = 0.02  # serve_sim_app.py's


@pytest.fixture(scope="module")
def sim_url():
    port = free_port()
    log = tempfile.TemporaryFile(mode="w+")
    process = subprocess.Popen(
        [sys.executable, str(HERE / "serve_sim_app.py"), str(port)],
        stdout=subprocess.PIPE, stderr=log, text=True, env={**os.environ, "RAY_AUTH_MODE": "disabled"},
    )  # fmt: skip
    ready = threading.Event()

    def watch() -> None:
        for line in process.stdout:
            if line.strip() == "READY":
                ready.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        if not ready.wait(READY_TIMEOUT_S):
            log.seek(0)
            raise RuntimeError(f"the simulated app was not ready within {READY_TIMEOUT_S:.0f} s:\n{log.read()[-3000:]}")
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def chat(url, text, *, session, max_tokens=8, pool=None, stream=False):
    headers = {"x-session-id": session}
    if pool:
        headers["x-dspine-pool"] = pool
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "stream": stream}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=20)


def long_text(tag: str, num_blocks: int) -> str:
    """Distinct filler text of `num_blocks` full prefix blocks."""
    words = " ".join(f"{tag}-{i}" for i in range(num_blocks * BLOCK_CHARS // 6))
    return words[: num_blocks * BLOCK_CHARS]


def test_chat_over_http_streams_and_answers(sim_url):
    plain = chat(sim_url, "hello", session="plain", max_tokens=16)
    assert plain.status_code == 200
    usage = plain.json()["usage"]
    assert usage["completion_tokens"] == 16  # the simulated engine always generates max_tokens
    assert plain.headers["x-dspine-replica"] and plain.headers["x-dspine-path"] == "speculative"
    streamed = chat(sim_url, "hello again", session="streamed", max_tokens=16, stream=True)
    assert streamed.status_code == 200
    events = [line[5:].strip() for line in streamed.text.splitlines() if line.startswith("data:")]
    assert events[-1] == "[DONE]" and len(events) >= 2


def test_server_timing_tells_where_the_time_to_the_first_chunk_went(sim_url):
    # A cold prompt of 40 prefix blocks (81,920 characters: about 20,480 tokens by the ingress's 4
    # characters per token) cannot have its first chunk before its prefill on the twin:
    # prefill_alone_ms of the pool's profile, times time_scale, in wall seconds.
    (_name, config), = load_app_configs(HERE.parents[1] / "clusters" / "sim.yaml")
    profile = load_profile(config.pool("dspine").engine.profile)
    tokens = 40 * BLOCK_CHARS // 4 + 1  # the ingress's estimate: len(text) // 4 + 1
    prefill_wall_s = prefill_alone_ms(profile, tokens) / 1000.0 * TIME_SCALE  # 41.5 ms
    rounding = 0.00015  # each duration is told to 0.1 ms
    for stream in (False, True):
        text = long_text(f"timing-{stream}", 40)
        answer = chat(sim_url, text, session=f"timing-{stream}", max_tokens=4, pool="dspine", stream=stream)
        assert answer.status_code == 200
        timing = parse_server_timing(answer.headers["server-timing"])
        assert set(timing) == {"parse", "replica", "ingress"}
        assert 0.0 <= timing["parse"] <= timing["ingress"]
        assert prefill_wall_s - rounding <= timing["replica"] <= timing["ingress"] - timing["parse"] + rounding


def test_same_session_stays_on_one_replica(sim_url):
    for session in ("stay-a", "stay-b", "stay-c"):
        replicas = {chat(sim_url, f"turn {i}", session=session, pool="dspine").headers["x-dspine-replica"] for i in range(4)}
        assert len(replicas) == 1, f"session {session} moved between replicas {replicas}"


def test_shared_prefix_lands_on_the_replica_that_holds_it(sim_url):
    prefixes = [long_text(f"doc{k}", 3) for k in range(3)]
    holders = []
    with httpx.Client(timeout=60) as client, contextlib.ExitStack() as open_streams:
        for k in range(3):
            body = {"model": MODEL, "messages": [{"role": "user", "content": prefixes[k]}], "max_tokens": 2000,
                    "stream": True}  # fmt: skip
            headers = {"x-session-id": f"holder-{k}", "x-dspine-pool": "dspine"}
            answer = open_streams.enter_context(client.stream("POST", f"{sim_url}/v1/chat/completions", json=body, headers=headers))
            assert answer.status_code == 200
            holders.append(answer.headers["x-dspine-replica"])  # placed; still decoding while the next is sent
    # Each placement counts in the router's reservation ledger until a load report shows it, so the three
    # overlapping first turns spread out, and the check below is not met by a default pick.
    assert len(set(holders)) >= 2
    time.sleep(1.0)  # reports after the first turns ended: every replica is idle again
    for k in range(3):
        follower = chat(sim_url, prefixes[k] + " and one more question", session=f"follower-{k}", pool="dspine")
        assert follower.headers["x-dspine-replica"] == holders[k]


def test_arm_split_follows_the_traffic_policy_and_sticks(sim_url):
    (_name, config), = load_app_configs(HERE.parents[1] / "clusters" / "sim.yaml")
    chosen: dict[str, list[str]] = {"dspine": [], "dflash2": []}
    for i in range(400):
        session = f"arm-{i}"
        _pool, arm = assign(config.traffic, "medium", f"sid:{session}")
        if len(chosen[arm]) < 3:
            chosen[arm].append(session)
    assert all(len(sessions) == 3 for sessions in chosen.values())  # a 10 % arm shows up within 400 sessions
    for arm, sessions in chosen.items():
        for session in sessions:
            for _ in range(2):
                answer = chat(sim_url, "which arm?", session=session)
                assert answer.status_code == 200
                assert answer.headers["x-dspine-arm"] == arm
                assert answer.headers["x-dspine-pool"] == arm  # each arm has its own pool here
