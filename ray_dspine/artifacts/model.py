"""What a model artifact is: a location (S3 prefix or local folder) plus the files it must hold, pinned.

Rules:
  uri       `s3://bucket/key-prefix` (bucket 3-63 of [a-z0-9.-]) or a local folder path (absolute, or
            relative to the working directory).
  path      each pinned file's path is relative POSIX ("config.json", "model-00001-of-00011.safetensors",
            "tokenizer/vocab.json"): no leading "/", no "." or ".." segments, no backslashes; unique.
  sha256    64 lowercase hex digits; `size_bytes`, when given, must match too (checked before hashing).
  empty     size_bytes == 0 pins the empty file, so its sha256 must be EMPTY_SHA256, or a placeholder digest
            (one hex digit repeated 64 times: `deploy/pins.py` reports those): any other digest cannot match.
Validators check shapes only (no I/O); `fetch.py` does the reading.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # sha256 of zero bytes


class ArtifactError(RuntimeError):
    """An artifact that cannot be fetched or does not match its pins; the message names the file."""


class PinnedFile(BaseModel):
    """One file of an artifact and the bytes it must contain."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1, max_length=1024, description="Relative POSIX path inside the artifact.")
    sha256: str = Field(description="Expected sha256 of the file, 64 lowercase hex digits.")
    size_bytes: int | None = Field(
        default=None, ge=0, description="Expected size in bytes (`stat -c %s FILE`); None skips the size check."
    )

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        parts = value.split("/")
        if value.startswith("/") or "\\" in value or any(part in ("", ".", "..") for part in parts):
            raise ValueError(f"pinned path {value!r} must be relative POSIX without '', '.' or '..' segments")
        return value

    @field_validator("sha256")
    @classmethod
    def _check_sha256(cls, value: str) -> str:
        if not _SHA256_RE.match(value):
            raise ValueError(f"sha256 {value!r} must be 64 lowercase hex digits")
        return value

    @model_validator(mode="after")
    def _check_empty(self) -> PinnedFile:
        """Rule `empty`."""
        if self.size_bytes == 0 and self.sha256 != EMPTY_SHA256 and len(set(self.sha256)) != 1:
            raise ValueError(
                f"{self.path}: size_bytes 0 pins an empty file, whose sha256 is {EMPTY_SHA256}, not {self.sha256}: "
                "pin the file's real size (`stat -c %s FILE`)"
            )
        return self


class ArtifactRef(BaseModel):
    """A model or drafter to load: where it lives and the files (with hashes) it must have."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str = Field(min_length=1, description="s3://bucket/key-prefix, or a local folder path.")
    files: list[PinnedFile] = Field(min_length=1, description="Every file the engine needs, pinned by sha256.")

    @field_validator("uri")
    @classmethod
    def _check_uri(cls, value: str) -> str:
        if value.startswith("s3://"):
            parse_s3_uri(value)
        elif "://" in value:
            raise ValueError(f"artifact uri {value!r}: only s3:// or a local path is supported")
        return value

    @model_validator(mode="after")
    def _check_unique(self) -> ArtifactRef:
        paths = [pinned.path for pinned in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError(f"artifact {self.uri} pins a path twice: {sorted(paths)}")
        return self

    @property
    def is_s3(self) -> bool:
        return self.uri.startswith("s3://")


@dataclass(frozen=True)
class S3Prefix:
    bucket: str
    prefix: str  # no leading or trailing slash; "" for the bucket root

    def key_for(self, relative_path: str) -> str:
        return f"{self.prefix}/{relative_path}" if self.prefix else relative_path


def parse_s3_uri(uri: str) -> S3Prefix:
    """Split `s3://bucket/prefix`; a bad bucket or an empty/'.'/'..' segment raises ValueError."""
    if not uri.startswith("s3://"):
        raise ValueError(f"expected s3://bucket/prefix, got {uri!r}")
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise ValueError(f"invalid bucket {bucket!r} in {uri!r}: 3-63 of [a-z0-9.-], alphanumeric at both ends")
    prefix = prefix.strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ValueError(f"invalid key prefix {prefix!r} in {uri!r}: empty, '.' or '..' segments")
    return S3Prefix(bucket=bucket, prefix=prefix)
