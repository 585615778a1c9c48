"""Fixtures shared across suites: one local S3-compatible gateway (Ceph RADOS Gateway) per test session,
and a tiny random-weight LlamaForCausalLM with a character tokenizer (`tiny`) for engine rule tests that
need real attention and a real KV cache but not the real model's seconds.

One gateway serves every suite that needs S3: two Ceph clusters on one machine interfere (an OSD of
one can answer the other's monitor with "wrong fsid"). Set `DSPINE_SKIP_S3=1` to skip those tests;
otherwise a gateway that fails to start fails them. `local_serve_app` starts a real Ray Serve app on a
private local cluster for the suites that serve over HTTP.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from free_ports import free_port

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "s3-local"


# Fresh ports and a fresh scratch folder per run: nothing a crashed earlier gateway left behind
# can be mistaken for this one.
PORT = str(free_port())
MON_PORT = str(free_port())


def _run(command: str, scratch: str) -> subprocess.CompletedProcess[str]:
    args = [str(SCRIPT), command, "--port", PORT, "--mon-port", MON_PORT, "--dir", scratch]
    return subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)


@pytest.fixture(scope="session")
def s3_env():
    """Start the gateway, export its AWS_* variables for the session, stop it at the end.

    The scratch folder is removed after a clean stop; after a failed start it stays, logs included,
    and the failure names it.
    """
    if os.environ.get("DSPINE_SKIP_S3") == "1":
        pytest.skip("DSPINE_SKIP_S3=1: local S3 gateway tests skipped on request")
    scratch = tempfile.mkdtemp(prefix="ray-dspine-s3-")
    started = _run("start", scratch)
    if started.returncode != 0:
        _run("stop", scratch)
        pytest.fail(
            f"scripts/s3-local start failed (rc {started.returncode}; logs under {scratch}):\n"
            f"{started.stderr[-4000:]}"
        )
    exports = _run("env", scratch).stdout
    values = dict(part.split("=", 1) for line in exports.splitlines() for part in shlex.split(line)[1:])
    with pytest.MonkeyPatch.context() as patch:
        for name, value in values.items():
            patch.setenv(name, value)
        yield values
    if _run("stop", scratch).returncode == 0:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="module")
def local_serve_app():
    """start(app, name) -> the base URL of a real Ray Serve app, once healthy; it stops after the module.

    The cluster listens on 127.0.0.1 only, with token auth off (RAY_AUTH_MODE=disabled) and 2 CPUs; the app is
    healthy once GET /health answers 200 (every pool has a replica), within 240 s.
    """
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray import serve

    def start(app, name: str) -> str:
        port = str(free_port())
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never join another cluster
        serve.start(http_options={"host": "127.0.0.1", "port": int(port)})
        serve.run(app, name=name, route_prefix="/", blocking=False)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
            time.sleep(1)
        raise RuntimeError(f"the Serve app {name!r} did not become healthy within 240 s")

    yield start
    if ray.is_initialized():
        serve.shutdown()
        ray.shutdown()


# Small hand-written traces for the simulator and autoscaling suites (the real ones stay in
# ../shared/data/traces and are never copied).
AZURE_CSV = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:00:00.0000000,1000,20
2023-11-16 18:00:05.0000000,2000,5
2023-11-16 18:00:10.5000000,600,40
2023-11-16 18:00:20.0000000,1500,1
"""

MOONCAKE_JSONL = """{"timestamp": 0, "input_length": 1100, "output_length": 30, "hash_ids": [0, 1, 2]}
{"timestamp": 3000, "input_length": 1600, "output_length": 10, "hash_ids": [0, 1, 3, 4]}
{"timestamp": 9000, "input_length": 300, "output_length": 50, "hash_ids": [5]}
"""


@pytest.fixture
def azure_path(tmp_path):
    path = tmp_path / "tiny_code.csv"
    path.write_text(AZURE_CSV, encoding="utf-8")
    return path


@pytest.fixture
def mooncake_path(tmp_path):
    path = tmp_path / "tiny_mooncake.jsonl"
    path.write_text(MOONCAKE_JSONL, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def serve_instance(request):
    """A private local Ray cluster (no token auth, loopback) with Serve, for one test module.

    Workers import the package and the test module's own deployment classes through PYTHONPATH.
    """
    import ray
    from ray import serve

    previous = os.environ.get("RAY_AUTH_MODE")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    pythonpath = os.pathsep.join([str(REPO), str(Path(request.module.__file__).parent)])
    ray.init(address="local", num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
    serve.start(http_options={"location": "NoServer"})
    try:
        yield
    finally:
        serve.shutdown()
        ray.shutdown()
        if previous is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = previous


class CharTokenizer:
    """Printable ASCII: id = ord(c) - 32 (95 ids); id 95 is end of sequence."""

    eos_token_id = 95

    def encode(self, text, add_special_tokens=False):
        return [ord(c) - 32 for c in text if 32 <= ord(c) < 127]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i + 32) for i in ids if i < 95)

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        text = "".join(f"{m['role']}: {m['content']}|" for m in messages)
        return text + ("assistant: " if add_generation_prompt else "")

    def convert_ids_to_tokens(self, token_id):
        return "</s>" if token_id == 95 else chr(token_id + 32)

    def get_vocab(self):
        return {self.convert_ids_to_tokens(i): i for i in range(96)}

    def get_added_vocab(self):
        return {"</s>": 95}


def tiny_loaded(seed: int = 0):
    """The tiny model as a LoadedModel (torch and transformers imported here, not when this file loads: some
    suites check what their imports pull in)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ray_dspine.engines.embedded.model import LoadedModel

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512,
    )
    model = LlamaForCausalLM(config).eval()
    return LoadedModel(model, CharTokenizer(), Path("tiny.gguf"), "0" * 64, frozenset({95}), 512)


@pytest.fixture(scope="module")
def tiny():
    return tiny_loaded()
