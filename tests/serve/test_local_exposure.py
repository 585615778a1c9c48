"""The local stack as scripts/serve-local starts it listens on loopback only, and its Ray requires the token.

`python -m ray_dspine.local_cluster` (what serve-local runs) starts the head on free ports and `serve run`s
clusters/sim.yaml on it (the simulated engine, light on 2 cores) with its HTTP port moved to a free one; a
SIGTERM then stops it, and none of its processes may outlive that.
Every TCP listener of the head's process tree and of `serve run` must be on 127.0.0.1 / ::1 (IPv4-mapped
included) or be a Ray gRPC port that answers UNAUTHENTICATED to a call without the token.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import grpc
import httpx
import psutil
import pytest
import yaml

from free_ports import free_port

from ray_dspine import local_cluster

pytestmark = pytest.mark.serve

REPO = Path(__file__).resolve().parents[2]
# One method of each Ray gRPC service a port can host; a call without the token must come back UNAUTHENTICATED.
PROBES = [
    "/ray.rpc.NodeInfoGcsService/GetAllNodeInfo",
    "/ray.rpc.RayletDriver/ClusterInfo",
    "/ray.rpc.NodeManagerService/GetNodeStats",
    "/ray.rpc.CoreWorkerService/GetCoreWorkerStats",
    "/ray.serve.ASGIService/HandleRequest",  # a Serve replica's inter-deployment server, bound to [::] by Ray
]


def is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def refuses_without_token(ip: str, port: int) -> bool:
    host = "127.0.0.1" if ip in ("0.0.0.0", "::") else ip
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    with grpc.insecure_channel(target) as channel:
        for method in PROBES:
            try:
                channel.unary_unary(method)(b"", timeout=3)
                return False  # answered without the token
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    return True
    return False


def listeners(pids: set[int]) -> list[tuple[str, int, str]]:
    found = []
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids:
            try:
                name = psutil.Process(conn.pid).name()
            except psutil.NoSuchProcess:
                name = "?"
            found.append((conn.laddr.ip, conn.laddr.port, name))
    return found


def tree(pid: int) -> set[int]:
    try:
        root = psutil.Process(pid)
        return {pid} | {child.pid for child in root.children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def test_token_file_is_private(tmp_path):
    path = local_cluster.ensure_token(tmp_path / "ray" / "auth_token")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text()) == 64  # 256 bits in hex
    first = path.read_text()
    os.chmod(path, 0o644)
    assert local_cluster.ensure_token(path).read_text() == first  # kept, not regenerated
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    env = local_cluster.ray_env(path, base={"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": "x"})
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN_PATH"] == str(path)
    assert env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0" and "RAY_AUTH_TOKEN" not in env


def test_local_stack_listens_on_loopback_or_requires_the_token(tmp_path):
    http_port, gcs_port = free_port(), free_port()
    config = yaml.safe_load((REPO / "clusters" / "sim.yaml").read_text())
    config["http_options"]["port"] = http_port
    config_path = tmp_path / "sim.yaml"
    config_path.write_text(yaml.safe_dump(config))
    token = tmp_path / "ray" / "auth_token"
    env = dict(os.environ, DSPINE_RAY_PORT=str(gcs_port), DSPINE_RAY_CLIENT_PORT=str(free_port()),
               DSPINE_RAY_TOKEN_FILE=str(token))
    # what scripts/serve-local runs after its set-up step
    output = tmp_path / "stack.log"  # its tail goes in the failure message when the stack exits early
    with open(output, "wb") as log:
        stack = subprocess.Popen([str(local_cluster.BIN / "python"), "-m", "ray_dspine.local_cluster", str(config_path)],
                                 env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    started: set[int] = set()
    try:
        url = f"http://127.0.0.1:{http_port}"
        deadline = time.monotonic() + 180
        ready = False
        while time.monotonic() < deadline and stack.poll() is None:
            started |= tree(stack.pid)
            try:
                ready = httpx.get(f"{url}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                pass
            if ready:
                break
            time.sleep(1)
        tail = output.read_bytes()[-3000:].decode("utf-8", "replace")
        assert ready, f"the app did not become healthy (the stack's status {stack.poll()}); its output ends:\n{tail}"
        assert stat.S_IMODE(token.stat().st_mode) == 0o600
        pids = tree(stack.pid)
        started |= pids
        found = listeners(pids)
        print("\nlisteners:", sorted(found))
        assert (http_port, True) in {(port, is_loopback(ip)) for ip, port, _ in found}
        assert gcs_port in {port for _, port, _ in found}
        exposed = [(ip, port, name) for ip, port, name in found
                   if not is_loopback(ip) and not refuses_without_token(ip, port)]
        assert exposed == []
        # Ray's token auth is on: the GCS refuses a call without the token and answers one with it.
        assert refuses_without_token("127.0.0.1", gcs_port)
        with grpc.insecure_channel(f"127.0.0.1:{gcs_port}") as channel:
            call = channel.unary_unary(PROBES[0])
            call(b"", timeout=5, metadata=(("authorization", "Bearer " + token.read_text().strip()),))
    finally:
        started |= tree(stack.pid)
        if stack.poll() is None:
            stack.send_signal(signal.SIGTERM)  # what a stop of serve-local sends; it stops what it started
            try:
                stack.wait(timeout=60)
            except subprocess.TimeoutExpired:
                for pid in started:
                    if psutil.pid_exists(pid):
                        psutil.Process(pid).kill()
                stack.wait(timeout=10)
    assert stack.returncode == 130
    time.sleep(1)
    alive = []
    for pid in sorted(started):
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    assert alive == []


def test_a_stopped_head_leaves_no_current_cluster_record(tmp_path):
    from ray_dspine.local_cluster import forget_address

    record = tmp_path / "ray_current_cluster"
    record.write_text("127.0.0.1:6390")
    forget_address("127.0.0.1:6391", str(tmp_path))  # another head's record stays
    assert record.read_text() == "127.0.0.1:6390"
    forget_address("127.0.0.1:6390", str(tmp_path))  # ours goes
    assert not record.exists()
    forget_address("127.0.0.1:6390", str(tmp_path))  # nothing to remove: no error
