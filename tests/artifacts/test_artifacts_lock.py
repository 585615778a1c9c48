"""One writer per artifact folder: two real processes fetch one pinned artifact into one cache folder.

The processes are spawned (`multiprocessing`, start method "spawn"), each with its own boto3 client to
the session's local S3 gateway, wrapped so every byte it receives is logged to a shared file with its
process id. Files are written from those bytes only, so the log counts the writes.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from ray_dspine.artifacts import ArtifactError, ArtifactRef, PinnedFile, fetch
from ray_dspine.artifacts.fetch import LOCK_FILE, folder_lock, local_root

FILES = {
    "config.json": b'{"model_type": "qwen3_5", "num_hidden_layers": 64}',  # 50 bytes
    "model-00001-of-00002.safetensors": bytes(range(256)) * 1200,  # 307,200 bytes
    "model-00002-of-00002.safetensors": bytes(reversed(range(256))) * 800,  # 204,800 bytes
}
FIRST_GET_DELAY_S = 2.0  # each GET waits this long, so the other process surely arrives while one holds the lock


def _pins() -> list[dict]:
    return [{"path": p, "sha256": hashlib.sha256(d).hexdigest(), "size_bytes": len(d)} for p, d in FILES.items()]


class LoggingClient:
    """A boto3 client whose get_object waits, then logs `<pid> <key> <bytes>` for every chunk it yields."""

    def __init__(self, inner, log_path: str):
        self.inner, self.log_path = inner, log_path

    def get_object(self, **kwargs):
        time.sleep(FIRST_GET_DELAY_S)
        response = self.inner.get_object(**kwargs)
        body, log_path, key = response["Body"], self.log_path, kwargs["Key"]

        class Body:
            def iter_chunks(self, chunk_bytes):
                for block in body.iter_chunks(chunk_bytes):
                    with open(log_path, "a", encoding="ascii") as log:  # O_APPEND: whole lines
                        log.write(f"{os.getpid()} {key} {len(block)}\n")
                    yield block

            def close(self):
                body.close()

        return {**response, "Body": Body()}


def fetch_in_child(uri: str, pins: list[dict], cache_dir: str, log_path: str, out_path: str, barrier) -> None:
    """Runs in a spawned process: fetch after the barrier, then record what it ended with."""
    from ray_dspine.artifacts import ArtifactRef, fetch, make_s3_client, verify_local

    ref = ArtifactRef(uri=uri, files=pins)
    client = LoggingClient(make_s3_client(), log_path)
    barrier.wait(60)
    started = time.monotonic()
    root = fetch(ref, cache_dir, s3_client=client, max_workers=3)
    waited_s = time.monotonic() - started
    verify_local(root, ref.files)  # re-hashes every file in place: raises on any wrong byte
    files = {p.path: [os.stat(root / p.path).st_ino, os.stat(root / p.path).st_mtime_ns] for p in ref.files}
    Path(out_path).write_text(json.dumps({"pid": os.getpid(), "root": str(root), "files": files, "s": waited_s}))


@pytest.mark.s3
def test_rule_lock_two_processes_write_each_file_once(s3_bucket, tmp_path: Path):
    client, bucket = s3_bucket
    for path, data in FILES.items():
        client.put_object(Bucket=bucket, Key=f"qwen/{path}", Body=data)
    uri, cache, log = f"s3://{bucket}/qwen", tmp_path / "cache", tmp_path / "gets.log"
    log.touch()
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    outs = [tmp_path / f"out-{i}.json" for i in range(2)]
    children = [context.Process(target=fetch_in_child, args=(uri, _pins(), str(cache), str(log), str(out), barrier))
                for out in outs]  # fmt: skip
    for child in children:
        child.start()
    for child in children:
        child.join(120)
    assert [child.exitcode for child in children] == [0, 0]

    results = [json.loads(out.read_text()) for out in outs]
    root = cache / "s3" / bucket / "qwen"
    assert {r["root"] for r in results} == {str(root)}
    lines = [line.split() for line in log.read_text().splitlines()]
    writers = {int(pid) for pid, _, _ in lines}
    assert len(writers) == 1 and writers <= {r["pid"] for r in results}  # one process received (and wrote) bytes
    received = {}
    for _, key, size in lines:
        received[key] = received.get(key, 0) + int(size)
    # each file's bytes arrived exactly once: 50, 307,200 and 204,800 bytes, 512,050 in all
    assert received == {f"qwen/{path}": len(data) for path, data in FILES.items()}
    # both processes ended with the same files: the second one replaced nothing (same inode and mtime)
    assert results[0]["files"] == results[1]["files"]
    for path, data in FILES.items():
        assert (root / path).read_bytes() == data and not (root / f"{path}.partial").exists()
    # the one that did not write waited for the lock while the other fetched (at least one delayed GET)
    reader = next(r for r in results if r["pid"] not in writers)
    assert reader["s"] >= FIRST_GET_DELAY_S


def test_rule_lock_waiting_past_the_timeout_names_the_lock(tmp_path: Path):
    ref = ArtifactRef(uri="s3://models/qwen", files=[PinnedFile(path="config.json", sha256="a" * 64, size_bytes=3)])
    root = local_root(ref, tmp_path)

    class NoCalls:
        def get_object(self, **kwargs):
            raise AssertionError("nothing may be fetched without the lock")

    started = time.monotonic()
    with folder_lock(root):  # another holder (a second open file: flock excludes it even in this process)
        with pytest.raises(ArtifactError, match=rf"{root}: another process has held {root / LOCK_FILE} for more "
                                                r"than 0.3 s"):  # fmt: skip
            fetch(ref, tmp_path, s3_client=NoCalls(), lock_timeout_s=0.3)
    assert 0.3 <= time.monotonic() - started < 5


def hold_lock_forever(root: str, ready) -> None:
    with folder_lock(Path(root)):
        ready.set()
        time.sleep(600)


def test_rule_lock_a_killed_holder_leaves_no_stale_lock(tmp_path: Path):
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    holder = context.Process(target=hold_lock_forever, args=(str(tmp_path / "artifact"), ready))
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(ArtifactError, match="another process has held"):
            with folder_lock(tmp_path / "artifact", timeout_s=0.2):
                pass
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
    started = time.monotonic()
    with folder_lock(tmp_path / "artifact", timeout_s=5):  # the kernel released it with the process
        assert time.monotonic() - started < 1


def test_rule_accept_size_is_checked_before_hashing(tmp_path: Path, monkeypatch):
    (tmp_path / "w.safetensors").write_bytes(b"x" * 1000)
    ref = ArtifactRef(uri=str(tmp_path), files=[PinnedFile(
        path="w.safetensors", sha256=hashlib.sha256(b"x" * 1024).hexdigest(), size_bytes=1024)])  # fmt: skip

    def no_hashing(*args, **kwargs):
        raise AssertionError("hashed before the size check")

    monkeypatch.setattr(importlib.import_module("ray_dspine.artifacts.fetch"), "sha256_file", no_hashing)
    with pytest.raises(ArtifactError) as info:
        fetch(ref, tmp_path / "cache")
    assert str(info.value) == (f"w.safetensors: size mismatch in {tmp_path}: expected 1024 bytes, got 1000 bytes "
                               "(the pin's size_bytes or the file is wrong)")  # fmt: skip


def test_rule_empty_size_zero_needs_the_empty_digest_or_a_placeholder():
    from pydantic import ValidationError

    from ray_dspine.artifacts.model import EMPTY_SHA256

    assert EMPTY_SHA256 == hashlib.sha256(b"").hexdigest()
    assert PinnedFile(path="empty.txt", sha256=EMPTY_SHA256, size_bytes=0).size_bytes == 0
    assert PinnedFile(path="w.safetensors", sha256="0" * 64, size_bytes=0).size_bytes == 0  # a placeholder
    with pytest.raises(ValidationError, match="w.safetensors: size_bytes 0 pins an empty file"):
        PinnedFile(path="w.safetensors", sha256=hashlib.sha256(b"w").hexdigest(), size_bytes=0)
