"""A real S3 endpoint for the artifact tests: `scripts/s3-local` (Ceph RADOS Gateway on 127.0.0.1).

Same approach as tests/s3/conftest.py, on its own ports and scratch folder so the two suites never share a
gateway. Set `DSPINE_SKIP_S3=1` to skip these tests; otherwise a gateway that fails to start fails them.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "s3-local"
def _free_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


# Fresh ports and a fresh scratch folder per run: nothing a stopped or crashed earlier gateway
# left behind (a monitor of another cluster on the same port) can be mistaken for this one.
PORT = _free_port()
MON_PORT = _free_port()
SCRATCH = tempfile.mkdtemp(prefix="ray-dspine-s3-")


def _run(command: str) -> subprocess.CompletedProcess[str]:
    args = [str(SCRIPT), command, "--port", PORT, "--mon-port", MON_PORT, "--dir", SCRATCH]
    return subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="session")
def s3_env():
    """Start the gateway, export its AWS_* variables for the session, stop it at the end."""
    if os.environ.get("DSPINE_SKIP_S3") == "1":
        pytest.skip("DSPINE_SKIP_S3=1: local S3 gateway tests skipped on request")
    started = _run("start")
    if started.returncode != 0:
        pytest.fail(f"scripts/s3-local start failed (rc {started.returncode}):\n{started.stderr[-4000:]}")
    exports = _run("env").stdout
    values = dict(part.split("=", 1) for line in exports.splitlines() for part in shlex.split(line)[1:])
    with pytest.MonkeyPatch.context() as patch:
        for name, value in values.items():
            patch.setenv(name, value)
        yield values
    _run("stop")


@pytest.fixture
def s3_bucket(s3_env):
    """A fresh bucket on the local gateway and a client for it."""
    from ray_dspine.artifacts import make_s3_client

    client = make_s3_client()
    bucket = f"dspine-artifacts-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket
