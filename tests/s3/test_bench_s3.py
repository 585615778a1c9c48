"""Run-folder upload to a real local S3 gateway, sha256 read-back, and location parsing."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import uuid
from pathlib import Path

import pytest

from ray_dspine.bench.s3 import (
    S3Location,
    S3UriError,
    S3VerificationError,
    make_client,
    maybe_upload,
    parse_s3_uri,
    register_s3_option,
    upload_run,
    verify_run,
)


def _make_run_dir(root: Path) -> Path:
    run = root / "run"
    (run / "plots").mkdir(parents=True)
    (run / "receipt.json").write_text(json.dumps({"model": "smollm2-135m", "seed": 7}))
    (run / "records.jsonl").write_text('{"arm": "spec", "output_tokens": 12}\n{"arm": "ar", "output_tokens": 9}\n')
    (run / "summary.json").write_text(json.dumps({"num_requests": 2}))
    (run / "plots" / "ttft.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    (run / ".partial").write_text("hidden files are not uploaded")
    return run


def _bucket() -> str:
    return f"dspine-test-{uuid.uuid4().hex[:12]}"


# --- location parsing (no server needed) ---------------------------------------------------------


def test_rule_uri_splits_bucket_and_prefix():
    assert parse_s3_uri("s3://runs/bench/2024-06-01/") == S3Location("runs", "bench/2024-06-01")
    assert parse_s3_uri("s3://runs") == S3Location("runs", "")
    assert S3Location("runs", "a/b").key_for("plots/x.png") == "a/b/plots/x.png"
    assert S3Location("runs", "").key_for("receipt.json") == "receipt.json"


@pytest.mark.parametrize(
    "uri, fragment",
    [
        ("runs/bench", "must start with 's3://'"),
        ("https://runs/bench", "must start with 's3://'"),
        ("s3://", "no bucket name"),
        ("s3:///prefix", "no bucket name"),
        ("s3://Runs/x", "invalid bucket name 'Runs'"),
        ("s3://ab/x", "invalid bucket name 'ab'"),
        ("s3://-runs/x", "invalid bucket name"),
        ("s3://runs/a//b", "invalid prefix"),
        ("s3://runs/a/../b", "invalid prefix"),
    ],
)
def test_bad_uri_errors_name_the_problem(uri, fragment):
    with pytest.raises(S3UriError, match=re.escape(fragment)):
        parse_s3_uri(uri)


def test_s3_option_rejects_bad_uri_at_parse_time(capsys):
    parser = argparse.ArgumentParser(prog="bench")
    register_s3_option(parser)
    assert parser.parse_args([]).s3 is None
    assert parser.parse_args(["--s3", "s3://runs/x"]).s3 == "s3://runs/x"
    with pytest.raises(SystemExit):
        parser.parse_args(["--s3", "runs/x"])
    assert "must start with 's3://'" in capsys.readouterr().err


def test_maybe_upload_without_option_does_nothing(tmp_path):
    assert maybe_upload(tmp_path, argparse.Namespace(s3=None)) == []


# --- against the real gateway ------------------------------------------------------------------------


@pytest.mark.s3
def test_rule_upload_then_read_back_matches_sha256(s3_env, tmp_path):
    run = _make_run_dir(tmp_path)
    bucket = _bucket()
    keys = upload_run(run, f"s3://{bucket}/bench/r1")
    assert keys == [
        "bench/r1/plots/ttft.png",
        "bench/r1/receipt.json",
        "bench/r1/records.jsonl",
        "bench/r1/summary.json",
    ]
    client = make_client()
    for key in keys:
        local = (run / key.removeprefix("bench/r1/")).read_bytes()
        got = client.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == local
        assert got["Metadata"]["sha256"] == hashlib.sha256(local).hexdigest()
    # A second upload to the same bucket (already ours) succeeds and verifies again.
    assert upload_run(run, f"s3://{bucket}/bench/r1") == keys
    assert verify_run(run, f"s3://{bucket}/bench/r1") == keys


@pytest.mark.s3
def test_maybe_upload_with_option(s3_env, tmp_path, capsys):
    run = _make_run_dir(tmp_path)
    keys = maybe_upload(run, argparse.Namespace(s3=f"s3://{_bucket()}"))
    assert keys[1] == "receipt.json"
    assert "uploaded 4 files" in capsys.readouterr().err


class _ByteFlippingClient:
    """Test double around a real client: every object read back has its first byte flipped."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def get_object(self, **kwargs):
        response = self._inner.get_object(**kwargs)
        data = bytearray(response["Body"].read())
        data[0] ^= 0x01
        return {**response, "Body": io.BytesIO(bytes(data))}


@pytest.mark.s3
def test_rule_corrupted_read_back_raises(s3_env, tmp_path):
    run = _make_run_dir(tmp_path)
    with pytest.raises(S3VerificationError, match="read-back sha256"):
        upload_run(run, f"s3://{_bucket()}/x", client=_ByteFlippingClient(make_client()))


@pytest.mark.s3
def test_overwritten_object_fails_verification(s3_env, tmp_path):
    run = _make_run_dir(tmp_path)
    bucket = _bucket()
    upload_run(run, f"s3://{bucket}/x")
    make_client().put_object(Bucket=bucket, Key="x/summary.json", Body=b'{"num_requests": 3}')
    with pytest.raises(S3VerificationError, match="x/summary.json"):
        verify_run(run, f"s3://{bucket}/x")
