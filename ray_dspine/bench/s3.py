"""Upload a benchmark run folder to S3 and prove it arrived intact.

Rule: every regular, non-hidden file `f` under the run folder (receipt.json, records.jsonl,
summary.json, plots/*.png, and anything else written there) goes to key `prefix/relpath(f)`; after
all puts, each object is read back and accepted only if `sha256(object bytes) == sha256(local bytes)`;
any mismatch raises `S3VerificationError` naming the key and both digests.

Parameters: `uri` is `s3://bucket[/prefix]` (bucket 3-63 characters of [a-z0-9.-], starting and ending
with a letter or digit; prefix segments non-empty). Endpoint, credentials and region come from the
standard AWS environment and config (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
`AWS_DEFAULT_REGION`, profiles); addressing is path-style so a gateway on 127.0.0.1 works.

Complexity: O(total bytes) hashing and transfer, 2 requests per file plus 1-2 for the bucket.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class S3UriError(ValueError):
    """An `s3://bucket/prefix` location that cannot be used."""


class S3VerificationError(RuntimeError):
    """An object read back from S3 does not hash to the bytes that were uploaded."""


class S3Client(Protocol):
    """The few boto3 S3 client calls this module makes (a wrapper can stand in for tests)."""

    def head_bucket(self, **kwargs: Any) -> Any: ...
    def create_bucket(self, **kwargs: Any) -> Any: ...
    def put_object(self, **kwargs: Any) -> Any: ...
    def get_object(self, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # no leading or trailing slash; "" for the bucket root

    def key_for(self, relative_path: str) -> str:
        return f"{self.prefix}/{relative_path}" if self.prefix else relative_path

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_s3_uri(uri: str) -> S3Location:
    """Split `s3://bucket/prefix` into bucket and prefix, with a clear error for a bad location."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise S3UriError(f"expected s3://bucket/prefix, got {uri!r} (must start with 's3://')")
    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise S3UriError(f"no bucket name in {uri!r}; expected s3://bucket/prefix")
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise S3UriError(
            f"invalid bucket name {bucket!r} in {uri!r}: use 3-63 characters of lowercase letters, digits,"
            " '.' and '-', starting and ending with a letter or digit"
        )
    prefix = prefix.strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise S3UriError(f"invalid prefix {prefix!r} in {uri!r}: empty, '.' or '..' path segments")
    return S3Location(bucket=bucket, prefix=prefix)


def make_client() -> S3Client:
    """A boto3 S3 client from the standard AWS env/config, path-style, checksums only where required."""
    import boto3
    from botocore.config import Config

    config = Config(
        s3={"addressing_style": "path"},
        retries={"max_attempts": 3, "mode": "standard"},
        # Newer boto3 adds CRC trailers by default; plain gateways (Ceph RGW, MinIO forks) may not speak them.
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    return boto3.client("s3", config=config)


def list_run_files(out_dir: str | os.PathLike[str]) -> list[Path]:
    """Regular, non-hidden files under the run folder, sorted by relative path."""
    root = Path(out_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"run folder {root} does not exist")
    files = [
        path
        for path in root.rglob("*")
        if path.is_file() and not any(part.startswith(".") for part in path.relative_to(root).parts)
    ]
    if not files:
        raise FileNotFoundError(f"run folder {root} holds no files to upload")
    return sorted(files, key=lambda path: path.relative_to(root).as_posix())


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def ensure_bucket(client: S3Client, bucket: str) -> None:
    """Create the bucket unless it exists; a bucket we already own is fine."""
    try:
        client.head_bucket(Bucket=bucket)
        return
    except Exception as exc:  # botocore ClientError; 404/NoSuchBucket means create it
        if _error_code(exc) not in ("404", "NoSuchBucket", "NotFound"):
            raise
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    kwargs: dict[str, Any] = {"Bucket": bucket}
    if region != "us-east-1":
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    try:
        client.create_bucket(**kwargs)
    except Exception as exc:
        if _error_code(exc) != "BucketAlreadyOwnedByYou":
            raise


def _local_digests(out_dir: str | os.PathLike[str], location: S3Location) -> dict[str, tuple[Path, str]]:
    root = Path(out_dir)
    return {
        location.key_for(path.relative_to(root).as_posix()): (path, sha256_hex(path.read_bytes()))
        for path in list_run_files(root)
    }


def verify_objects(client: S3Client, bucket: str, expected_sha256: dict[str, str]) -> None:
    """Read each key back and compare its sha256 with the expected one; raise on the first mismatch."""
    for key, expected in expected_sha256.items():
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
        got = sha256_hex(body)
        if got != expected:
            raise S3VerificationError(
                f"s3://{bucket}/{key}: read-back sha256 {got} != uploaded sha256 {expected} ({len(body)} bytes read)"
            )


def upload_run(out_dir: str | os.PathLike[str], uri: str, *, client: S3Client | None = None) -> list[str]:
    """Upload every file of a run folder under `uri`, verify each by sha256 read-back, return the keys."""
    location = parse_s3_uri(uri)
    digests = _local_digests(out_dir, location)
    client = client if client is not None else make_client()
    ensure_bucket(client, location.bucket)
    for key, (path, digest) in digests.items():
        client.put_object(Bucket=location.bucket, Key=key, Body=path.read_bytes(), Metadata={"sha256": digest})
    verify_objects(client, location.bucket, {key: digest for key, (_, digest) in digests.items()})
    return list(digests)


def verify_run(out_dir: str | os.PathLike[str], uri: str, *, client: S3Client | None = None) -> list[str]:
    """Check that the objects under `uri` still match the run folder's files byte for byte."""
    location = parse_s3_uri(uri)
    digests = _local_digests(out_dir, location)
    verify_objects(client if client is not None else make_client(), location.bucket,
                   {key: digest for key, (_, digest) in digests.items()})
    return list(digests)


def _s3_uri_arg(value: str) -> str:
    try:
        parse_s3_uri(value)
    except S3UriError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return value


def register_s3_option(parser: argparse.ArgumentParser) -> None:
    """Add `--s3 s3://bucket/prefix` (validated when parsed) to a command's parser."""
    parser.add_argument(
        "--s3",
        metavar="s3://bucket/prefix",
        type=_s3_uri_arg,
        default=None,
        help="after the run, upload the run folder here and verify each object by sha256 read-back "
        "(endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
    )


def maybe_upload(
    out_dir: str | os.PathLike[str], args: argparse.Namespace, *, client: S3Client | None = None
) -> list[str]:
    """After-run hook: upload the run folder when `--s3` was given; return the verified keys ([] if not asked).

    Reports on stderr so a `--json` report on stdout stays parseable.
    """
    uri = getattr(args, "s3", None)
    if not uri:
        return []
    keys = upload_run(out_dir, uri, client=client)
    print(f"uploaded {len(keys)} files to {parse_s3_uri(uri)} (sha256 verified)", file=sys.stderr)
    return keys
