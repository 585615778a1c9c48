"""Placeholder artifact pins: a config may ship with pins that only mark where real ones go.

Rules:
  placeholder  a pinned file is a placeholder iff its sha256 is one hex digit repeated 64 times ("000...0",
               "fff...f"): a real digest has that form with probability 16 * 16**-64. Its size_bytes is then
               0 by convention (the config files write placeholders as `sha256: "000...0", size_bytes: 0`).
               An artifact uri is a placeholder iff it contains PLACEHOLDER_MARKER ("replace-me").
  unsized      a pinned file without size_bytes is fetched without the size check that precedes hashing
               (artifacts/fetch.py, rule `accept`), so a truncated download is only caught after hashing
               every byte: each such file is reported.
`placeholder_findings` returns at most one finding per rule and artifact (uri, placeholder files, unsized
files), naming the files, so an operator sees every pin still to replace. Complexity: O(pinned files).
"""

from __future__ import annotations

from ray_dspine.artifacts import ArtifactRef

from .findings import Finding

PLACEHOLDER_MARKER = "replace-me"


def is_placeholder_sha256(sha256: str) -> bool:
    return len(sha256) == 64 and len(set(sha256)) == 1


def is_placeholder_uri(uri: str) -> bool:
    return PLACEHOLDER_MARKER in uri


def _names(ref: ArtifactRef, indices: list[int]) -> str:
    return "all" if len(indices) == len(ref.files) else ", ".join(ref.files[index].path for index in indices)


def placeholder_findings(ref: ArtifactRef, path: str) -> list[Finding]:
    """Warnings for `ref` at field `path` (e.g. `applications[0].args.pools[1].engine.target`)."""
    found: list[Finding] = []
    if is_placeholder_uri(ref.uri):
        found.append(
            Finding(
                "warning", f"{path}.uri", f"placeholder location {ref.uri!r}",
                "upload the files and put their real s3://bucket/prefix (or local folder) here",
            )
        )
    pinned = [index for index, file in enumerate(ref.files) if is_placeholder_sha256(file.sha256)]
    if pinned:
        found.append(
            Finding(
                "warning", f"{path}.files",
                f"{len(pinned)} of {len(ref.files)} sha256 pins are placeholders ({_names(ref, pinned)})",
                "pin each file with its real digest (`sha256sum FILE`) and size_bytes (`stat -c %s FILE`)",
            )  # fmt: skip
        )
    unsized = [index for index, file in enumerate(ref.files) if file.size_bytes is None]
    if unsized:
        found.append(
            Finding(
                "warning", f"{path}.files",
                f"{len(unsized)} of {len(ref.files)} pins have no size_bytes ({_names(ref, unsized)}): a wrong "
                "size is then caught only after hashing the whole file",
                "add size_bytes to each pin (`stat -c %s FILE`; 0 beside a placeholder sha256)",
            )  # fmt: skip
        )
    return found
