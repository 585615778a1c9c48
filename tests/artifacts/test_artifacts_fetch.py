"""Fetching pinned artifacts from a real local S3 gateway, resuming, refusing bad bytes; local folders."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pydantic import ValidationError

from ray_dspine.artifacts import ArtifactError, ArtifactRef, PinnedFile, fetch, parse_s3_uri

FILES = {
    "config.json": b'{"model_type": "qwen3_5", "num_hidden_layers": 64}',
    "model-00001-of-00002.safetensors": bytes(range(256)) * 400,  # 102,400 bytes
    "tokenizer/tokenizer.json": b'{"version": "1.0"}' * 50,
}


def _pin(path: str, data: bytes, *, with_size: bool = True) -> PinnedFile:
    return PinnedFile(path=path, sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data) if with_size else None)


class CountingClient:
    """Wraps a boto3 client: records each get_object's Range header."""

    def __init__(self, inner):
        self.inner = inner
        self.ranges: list[str | None] = []

    def get_object(self, **kwargs):
        self.ranges.append(kwargs.get("Range"))
        return self.inner.get_object(**kwargs)


class UnreadBody:
    """Wraps a boto3 client: the body of every GET fails if read (for checks that must come first)."""

    def __init__(self, inner):
        self.inner = inner

    def get_object(self, **kwargs):
        response = self.inner.get_object(**kwargs)
        inner_body = response["Body"]

        class Body:
            def iter_chunks(self, chunk_bytes):
                raise AssertionError("the body was read before the size check")

            def close(self):
                inner_body.close()

        return {**response, "Body": Body()}


def _upload(client, bucket: str, prefix: str, files: dict[str, bytes]) -> None:
    for path, data in files.items():
        client.put_object(Bucket=bucket, Key=f"{prefix}/{path}", Body=data)


# --- shapes (no server) ---------------------------------------------------------------------------


def test_rule_pinned_paths_are_relative_posix():
    good = "a" * 64
    assert PinnedFile(path="tokenizer/vocab.json", sha256=good).path == "tokenizer/vocab.json"
    for bad in ["/etc/passwd", "../x", "a//b", "a/./b", "a\\b"]:
        with pytest.raises(ValidationError):
            PinnedFile(path=bad, sha256=good)
    with pytest.raises(ValidationError):
        PinnedFile(path="x", sha256="ABC")


def test_artifact_ref_refuses_duplicates_and_other_schemes():
    pin = PinnedFile(path="x", sha256="0" * 64)
    with pytest.raises(ValidationError, match="pins a path twice"):
        ArtifactRef(uri="s3://models/q", files=[pin, pin])
    with pytest.raises(ValidationError, match="only s3://"):
        ArtifactRef(uri="https://example.com/q", files=[pin])
    assert parse_s3_uri("s3://models/qwen/27b/").prefix == "qwen/27b"


# --- local folders ------------------------------------------------------------------------------


def test_rule_local_folder_is_verified_in_place(tmp_path: Path):
    for path, data in FILES.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(data)
    ref = ArtifactRef(uri=str(tmp_path), files=[_pin(p, d) for p, d in FILES.items()])
    assert fetch(ref, tmp_path / "unused-cache") == tmp_path
    assert not (tmp_path / "unused-cache").exists()  # nothing copied

    (tmp_path / "config.json").write_bytes(b'{"model_type": "qwen3_6", "num_hidden_layers": 64}')
    expected = hashlib.sha256(FILES["config.json"]).hexdigest()
    # Same length as the original (50 bytes), so the size check passes and the hash check must catch it.
    with pytest.raises(ArtifactError, match=f"config.json: sha256 mismatch .*expected {expected}, got [0-9a-f]{{64}}"):
        fetch(ref, tmp_path / "unused-cache")


# --- real S3 --------------------------------------------------------------------------------------


@pytest.mark.s3
def test_rule_cached_files_are_not_fetched_again(s3_bucket, tmp_path: Path):
    client, bucket = s3_bucket
    _upload(client, bucket, "qwen/27b", FILES)
    ref = ArtifactRef(uri=f"s3://{bucket}/qwen/27b", files=[_pin(p, d) for p, d in FILES.items()])
    counting = CountingClient(client)
    seen: dict[str, int] = {}
    root = fetch(ref, tmp_path, s3_client=counting, max_workers=3, progress=lambda p, done, _: seen.__setitem__(p, done))

    assert root == tmp_path / "s3" / bucket / "qwen" / "27b"
    for path, data in FILES.items():
        assert (root / path).read_bytes() == data
        assert not (root / f"{path}.partial").exists()
        assert seen[path] == len(data)
    assert counting.ranges == [None, None, None]  # three whole-object GETs

    again = CountingClient(client)
    assert fetch(ref, tmp_path, s3_client=again) == root
    assert again.ranges == []  # every file is cached and verified: no request at all


@pytest.mark.s3
def test_rule_resume_continues_from_partial_size(s3_bucket, tmp_path: Path):
    client, bucket = s3_bucket
    data = FILES["model-00001-of-00002.safetensors"]
    _upload(client, bucket, "resume", {"w.safetensors": data})
    ref = ArtifactRef(uri=f"s3://{bucket}/resume", files=[_pin("w.safetensors", data)])
    root = tmp_path / "s3" / bucket / "resume"
    root.mkdir(parents=True)
    (root / "w.safetensors.partial").write_bytes(data[:40_000])  # an interrupted earlier download

    counting = CountingClient(client)
    fetch(ref, tmp_path, s3_client=counting)
    assert counting.ranges == ["bytes=40000-"]  # only the remaining 102,400 - 40,000 = 62,400 bytes
    assert (root / "w.safetensors").read_bytes() == data


@pytest.mark.s3
def test_rule_corrupted_object_is_refused_and_partial_deleted(s3_bucket, tmp_path: Path):
    client, bucket = s3_bucket
    good = FILES["config.json"]
    bad = b'{"model_type": "qwen3_5", "num_hidden_layers": 63}'  # same length, one byte differs
    _upload(client, bucket, "corrupt", {"config.json": bad})
    ref = ArtifactRef(uri=f"s3://{bucket}/corrupt", files=[_pin("config.json", good)])
    expected, actual = hashlib.sha256(good).hexdigest(), hashlib.sha256(bad).hexdigest()

    with pytest.raises(ArtifactError) as info:
        fetch(ref, tmp_path, s3_client=client)
    message = str(info.value)
    assert "config.json" in message and f"expected {expected}" in message and f"got {actual}" in message
    root = tmp_path / "s3" / bucket / "corrupt"
    assert not (root / "config.json").exists()
    assert not (root / "config.json.partial").exists()


@pytest.mark.s3
def test_unsized_pin_and_missing_object(s3_bucket, tmp_path: Path):
    client, bucket = s3_bucket
    data = FILES["tokenizer/tokenizer.json"]
    _upload(client, bucket, "unsized", {"tok.json": data})
    ref = ArtifactRef(uri=f"s3://{bucket}/unsized", files=[_pin("tok.json", data, with_size=False)])
    root = fetch(ref, tmp_path, s3_client=client)
    assert (root / "tok.json").read_bytes() == data

    missing = ArtifactRef(uri=f"s3://{bucket}/unsized", files=[_pin("absent.bin", b"x")])
    with pytest.raises(ArtifactError, match="absent.bin: cannot read"):
        fetch(missing, tmp_path, s3_client=client)


@pytest.mark.s3
def test_empty_file_and_placeholder_pins_with_size_zero(s3_bucket, tmp_path: Path):
    from ray_dspine.artifacts.model import EMPTY_SHA256

    client, bucket = s3_bucket
    _upload(client, bucket, "zero", {"empty.txt": b"", "config.json": FILES["config.json"]})
    empty = PinnedFile(path="empty.txt", sha256=EMPTY_SHA256, size_bytes=0)
    ref = ArtifactRef(uri=f"s3://{bucket}/zero", files=[empty])
    counting = CountingClient(client)
    root = fetch(ref, tmp_path, s3_client=counting)
    assert (root / "empty.txt").read_bytes() == b"" and counting.ranges == [None]  # the object's existence is checked

    placeholder = ArtifactRef(uri=f"s3://{bucket}/zero", files=[PinnedFile(path="config.json", sha256="0" * 64,
                                                                           size_bytes=0)])  # fmt: skip
    expected = r"config.json: size mismatch in s3://.*/zero/config.json: expected 0 bytes, got 50 bytes"
    with pytest.raises(ArtifactError, match=expected):
        fetch(placeholder, tmp_path, s3_client=UnreadBody(client))  # refused from the GET's headers
    assert not (root / "config.json").exists() and not (root / "config.json.partial").exists()
