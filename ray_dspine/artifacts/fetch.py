"""Fetch a pinned artifact into a local cache, resuming partial downloads and refusing bad bytes.

Rules:
  layout    s3://bucket/prefix -> <cache_dir>/s3/<bucket>/<prefix>/<path>; a local uri is used in place.
  cached    a file counts as present iff it exists, its recorded digest (<root>/.verified/<path>.sha256,
            written only after a successful check, by an atomic rename) equals the pin, and its size
            equals `size_bytes` when pinned. Present files are not downloaded again.
  lock      one writer per artifact folder: whoever finds a file missing takes an exclusive lock on
            <root>/.fetch.lock (fcntl.flock, released by the kernel when its holder exits, so a crashed
            fetch leaves no stale lock) and, holding it, looks again at what is missing. A second process
            (a replica on the same node, or on another node sharing the cache volume over a file system
            that honours flock) waits for the lock, then finds the first one's verified files and downloads
            nothing. Waiting longer than `lock_timeout_s` (None: no bound) raises ArtifactError.
  resume    bytes go to <path>.partial; a later call continues with `Range: bytes=<size(partial)>-`.
            A server that ignores the range (HTTP 200) restarts the file; a partial longer than
            `size_bytes` is discarded; 416 InvalidRange on a complete partial means nothing is left.
  accept    the size is checked first, when pinned: the object's size from the GET's headers
            (Content-Range's total, else offset + Content-Length) before any byte is read, then the bytes
            held; size != size_bytes deletes the partial and raises ArtifactError naming the file, the
            expected and the actual size. Then the file moves into
            place (atomic rename) iff sha256(all bytes) == pin; otherwise the partial is deleted and
            ArtifactError names the file, the expected and the actual digest.
  local     every pinned file must exist with the pinned size (checked before hashing) and digest;
            nothing is copied, nothing locked.
Parameters: max_workers 1-64 parallel downloads; chunk_bytes >= 64 KiB per read; lock_timeout_s > 0 or None.
Complexity: O(total bytes) transfer and hashing; one GET per missing file (plus one if a range is ignored);
a fetch that finds everything cached reads only the markers.
S3 access: boto3 with the standard AWS environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...), path-style
addressing so a gateway on 127.0.0.1 works.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Protocol

from .model import ArtifactError, ArtifactRef, PinnedFile, S3Prefix, parse_s3_uri

Progress = Callable[[str, int, "int | None"], None]
"""progress(path, bytes_done, bytes_total): called from worker threads as bytes arrive."""

DEFAULT_CHUNK_BYTES = 8 << 20
VERIFIED_DIR = ".verified"
LOCK_FILE = ".fetch.lock"
LOCK_POLL_S = 0.1


class S3Reader(Protocol):
    """The one boto3 S3 client call fetching needs (a wrapper can count or alter calls in tests)."""

    def get_object(self, **kwargs: Any) -> Any: ...


def make_s3_client() -> Any:
    """A boto3 S3 client from the standard AWS env/config: path-style, checksums only where required."""
    import boto3
    from botocore.config import Config

    config = Config(
        s3={"addressing_style": "path"},
        retries={"max_attempts": 3, "mode": "standard"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    return boto3.client("s3", endpoint_url=endpoint, config=config)


def sha256_file(path: Path, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


def local_root(ref: ArtifactRef, cache_dir: str | os.PathLike[str]) -> Path:
    """Where the artifact's files live locally (the cache folder for S3, the folder itself otherwise)."""
    if not ref.is_s3:
        return Path(ref.uri)
    location = parse_s3_uri(ref.uri)
    root = Path(cache_dir) / "s3" / location.bucket
    return root / location.prefix if location.prefix else root


def verify_local(root: Path, files: list[PinnedFile], chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
    """Check every pinned file under `root` in place; the first failure raises ArtifactError."""
    for pinned in files:
        path = root / pinned.path
        if not path.is_file():
            raise ArtifactError(f"{pinned.path}: missing from {root}")
        size = path.stat().st_size
        if pinned.size_bytes is not None and size != pinned.size_bytes:
            raise ArtifactError(_size_message(pinned, size, str(root)))
        actual = sha256_file(path, chunk_bytes)
        if actual != pinned.sha256:
            raise ArtifactError(f"{pinned.path}: sha256 mismatch in {root}: expected {pinned.sha256}, got {actual}")


def fetch(
    ref: ArtifactRef,
    cache_dir: str | os.PathLike[str],
    *,
    s3_client: S3Reader | None = None,
    max_workers: int = 8,
    progress: Progress | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    lock_timeout_s: float | None = None,
) -> Path:
    """Make every pinned file of `ref` available locally and return the folder that holds them."""
    if not 1 <= max_workers <= 64:
        raise ValueError(f"max_workers must be in [1, 64], got {max_workers}")
    if chunk_bytes < 64 << 10:
        raise ValueError(f"chunk_bytes must be at least 65536, got {chunk_bytes}")
    if lock_timeout_s is not None and lock_timeout_s <= 0:
        raise ValueError(f"lock_timeout_s must be > 0 or None, got {lock_timeout_s}")
    root = local_root(ref, cache_dir)
    if not ref.is_s3:
        verify_local(root, ref.files, chunk_bytes)
        return root
    if all(_is_cached(root, pinned) for pinned in ref.files):
        return root
    with folder_lock(root, lock_timeout_s):
        _fetch_missing(ref, root, s3_client, max_workers, progress, chunk_bytes)
    return root


@contextlib.contextmanager
def folder_lock(root: Path, timeout_s: float | None = None, clock=time.monotonic) -> Iterator[Path]:
    """Rule `lock`: hold the exclusive lock of the artifact folder `root` (created if need be)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / LOCK_FILE
    deadline = None if timeout_s is None else clock() + timeout_s
    with open(path, "a+b") as handle:
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and clock() >= deadline:
                    raise ArtifactError(
                        f"{root}: another process has held {path} for more than {timeout_s:g} s while fetching "
                        "this artifact; wait for it (raise lock_timeout_s) or end the stuck process"
                    ) from None
                time.sleep(LOCK_POLL_S)
        try:
            yield path
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _fetch_missing(ref, root, s3_client, max_workers, progress, chunk_bytes) -> None:
    """Download what is still missing; called with the folder's lock held."""
    missing = [pinned for pinned in ref.files if not _is_cached(root, pinned)]
    if not missing:
        return  # another process fetched and verified them while this one waited for the lock
    client = s3_client if s3_client is not None else make_s3_client()
    location = parse_s3_uri(ref.uri)
    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=min(max_workers, len(missing)), thread_name_prefix="artifact") as pool:
        futures = [
            pool.submit(_download, client, location, pinned, root, chunk_bytes, progress) for pinned in missing
        ]
        for future in futures:
            try:
                future.result()
            except ArtifactError as exc:
                errors.append(str(exc))
    if errors:
        raise ArtifactError(f"{len(errors)} of {len(missing)} files of {ref.uri} failed: " + "; ".join(errors))


def _size_message(pinned: PinnedFile, size: int, where: str) -> str:
    return (f"{pinned.path}: size mismatch in {where}: expected {pinned.size_bytes} bytes, got {size} bytes "
            "(the pin's size_bytes or the file is wrong)")  # fmt: skip


def _marker(root: Path, pinned: PinnedFile) -> Path:
    return root / VERIFIED_DIR / f"{pinned.path}.sha256"


def _is_cached(root: Path, pinned: PinnedFile) -> bool:
    path, marker = root / pinned.path, _marker(root, pinned)
    if not path.is_file() or not marker.is_file():
        return False
    if pinned.size_bytes is not None and path.stat().st_size != pinned.size_bytes:
        return False
    return marker.read_text(encoding="ascii").strip() == pinned.sha256


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _download(
    client: S3Reader,
    location: S3Prefix,
    pinned: PinnedFile,
    root: Path,
    chunk_bytes: int,
    progress: Progress | None,
) -> None:
    final = root / pinned.path
    partial = final.with_name(final.name + ".partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    key = location.key_for(pinned.path)
    source = f"s3://{location.bucket}/{key}"
    offset = partial.stat().st_size if partial.exists() else 0
    if pinned.size_bytes is not None and offset > pinned.size_bytes:
        partial.unlink()
        offset = 0
    digest = hashlib.sha256()
    if offset:
        with open(partial, "rb") as handle:
            while block := handle.read(chunk_bytes):
                digest.update(block)
    if offset == 0 or pinned.size_bytes is None or offset < pinned.size_bytes:  # an empty pin is fetched too
        digest, offset = _transfer(client, location.bucket, key, source, pinned, partial, offset, digest,
                                   chunk_bytes, progress)
    size = partial.stat().st_size
    if pinned.size_bytes is not None and size != pinned.size_bytes:
        partial.unlink()
        raise ArtifactError(_size_message(pinned, size, source))
    actual = digest.hexdigest()
    if actual != pinned.sha256:
        partial.unlink()
        raise ArtifactError(f"{pinned.path}: sha256 mismatch for {source}: expected {pinned.sha256}, got {actual}")
    os.replace(partial, final)
    marker = _marker(root, pinned)
    marker.parent.mkdir(parents=True, exist_ok=True)
    staged = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    staged.write_text(pinned.sha256 + "\n", encoding="ascii")
    os.replace(staged, marker)  # rule `cached`: a reader never sees a half-written marker


def _object_size(response: dict, offset: int) -> int | None:
    """The whole object's size from a GET's headers: Content-Range's total, else offset + Content-Length."""
    content_range = str(response.get("ContentRange") or "")
    if "/" in content_range and content_range.rsplit("/", 1)[1].isdigit():
        return int(content_range.rsplit("/", 1)[1])
    length = response.get("ContentLength")
    return offset + length if isinstance(length, int) else None


def _transfer(client, bucket, key, source, pinned, partial, offset, digest, chunk_bytes, progress):
    """GET the object from `offset` on, appending to the partial; returns (digest, bytes held)."""
    request: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if offset:
        request["Range"] = f"bytes={offset}-"
    try:
        response = client.get_object(**request)
    except Exception as exc:  # botocore ClientError or a transport error; the partial is kept for a retry
        if offset and _error_code(exc) == "InvalidRange":
            return digest, offset  # the partial already holds the whole object
        raise ArtifactError(f"{pinned.path}: cannot read {source}: {exc}") from exc
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 200))
    if offset and status == 200:  # the range was ignored: the body is the whole object
        digest, offset = hashlib.sha256(), 0
    body = response["Body"]
    total = _object_size(response, offset)
    if pinned.size_bytes is not None and total is not None and total != pinned.size_bytes:
        body.close()  # rule `accept`: refused before a byte is read or hashed
        partial.unlink(missing_ok=True)
        raise ArtifactError(_size_message(pinned, total, source))
    mode = "ab" if offset else "wb"
    try:
        with open(partial, mode) as out:
            for block in body.iter_chunks(chunk_bytes):
                out.write(block)
                digest.update(block)
                offset += len(block)
                if progress is not None:
                    progress(pinned.path, offset, pinned.size_bytes)
    except Exception as exc:  # disk errors or a dropped connection; the partial is kept for a retry
        raise ArtifactError(f"{pinned.path}: download from {source} stopped at {offset} bytes: {exc}") from exc
    finally:
        body.close()
    return digest, offset
