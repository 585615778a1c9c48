"""Model artifacts: pinned files on S3 (or a local folder), fetched into a cache and checked by sha256."""

from .fetch import fetch, local_root, make_s3_client, sha256_file, verify_local
from .model import ArtifactError, ArtifactRef, PinnedFile, parse_s3_uri

__all__ = [
    "ArtifactError",
    "ArtifactRef",
    "PinnedFile",
    "fetch",
    "local_root",
    "make_s3_client",
    "parse_s3_uri",
    "sha256_file",
    "verify_local",
]
