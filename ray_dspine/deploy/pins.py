"""Placeholder artifact pins: a config may ship with pins that only mark where real ones go.

Rule: a pinned file is a placeholder iff its sha256 is one hex digit repeated 64 times ("000...0",
"fff...f"): a real digest has that form with probability 16 * 16**-64. An artifact uri is a placeholder
iff it contains PLACEHOLDER_MARKER ("replace-me"). `placeholder_findings` returns one finding per
artifact, listing its placeholder files, so an operator sees every pin still to replace.
Complexity: O(pinned files).
"""

from __future__ import annotations

from ray_dspine.artifacts import ArtifactRef

from .findings import Finding

PLACEHOLDER_MARKER = "replace-me"


def is_placeholder_sha256(sha256: str) -> bool:
    return len(sha256) == 64 and len(set(sha256)) == 1


def is_placeholder_uri(uri: str) -> bool:
    return PLACEHOLDER_MARKER in uri


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
        names = "all" if len(pinned) == len(ref.files) else ", ".join(ref.files[index].path for index in pinned)
        found.append(
            Finding(
                "warning", f"{path}.files", f"{len(pinned)} of {len(ref.files)} sha256 pins are placeholders ({names})",
                "pin each file with its real digest (`sha256sum FILE`) and size (`stat -c %s FILE`)",
            )
        )
    return found
