"""The GPU worker pods' model cache in a rendered RayService: where SGLang replicas keep pinned artifacts.

Rules (M = mountPath of the worker container's `models` volume in the template, /mnt/models):
  kind   pvc (default): persistentVolumeClaim {claimName: claim_name}: one ReadWriteMany claim that every
         worker pod on every node mounts (clusters/kuberay/model-cache-pvc.yaml creates it), so a pod that
         starts after the first download finds verified files and downloads nothing;
         host-path: hostPath {path: host_path, type: DirectoryOrCreate}: kept by each node across pods;
         empty-dir: emptyDir {sizeLimit: <size_gib>Gi}: lost with the pod, so every pod downloads again.
  owner  the image runs as uid RAY_UID 1000, gid RAY_GID 100 (the Ray image's `ray` user): pvc sets the pod's
         fsGroup 100 (fsGroupChangePolicy OnRootMismatch) so the claim is group-writable; host-path adds an
         init container, run as root, that gives the node folder (created by the kubelet) to 1000:100 (hostPath
         ignores fsGroup); an emptyDir is writable by every user and needs neither.
  under  every GPU pool's cache_dir must be M or lie below it; otherwise its downloads land in the
         container's own file system and are lost with the pod.
  size   the distinct pinned files of the GPU pools' S3 artifacts (one per uri and path, the largest pin of
         it; a local folder is used in place) must fit: sum of size_bytes <= size_gib * 2**30 (unsized
         pins count 0, placeholders have size 0).
  lock   replicas that share the cache take artifacts/fetch.py's flock per artifact folder; across nodes
         (pvc) the file system must honour flock, as CephFS, NFSv4 and Amazon EFS do.
Complexity: O(pools + pinned files).
"""

from __future__ import annotations

import posixpath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_CLAIM = "ray-dspine-models"
DEFAULT_HOST_PATH = "/var/lib/ray-dspine/models"
DEFAULT_SIZE_GIB = 500
VOLUME_NAME = "models"
RAY_UID, RAY_GID = 1000, 100
ModelCacheKind = Literal["pvc", "host-path", "empty-dir"]
MODEL_CACHE_KINDS: tuple[str, ...] = ("pvc", "host-path", "empty-dir")


class ModelCacheError(ValueError):
    """A model cache the pools cannot use; the message names the pool or artifact and the fix."""


class ModelCache(BaseModel):
    """Which volume holds the worker pods' model cache (rule `kind`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ModelCacheKind = Field(default="pvc", description="pvc (shared, persistent), host-path (per node), "
                                 "or empty-dir (per pod, re-downloaded by every pod).")  # fmt: skip
    claim_name: str = Field(
        default=DEFAULT_CLAIM, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        description="Name of the ReadWriteMany PersistentVolumeClaim (kind pvc).",
    )  # fmt: skip
    host_path: str = Field(default=DEFAULT_HOST_PATH, description="Absolute node folder (kind host-path).")
    size_gib: int = Field(default=DEFAULT_SIZE_GIB, ge=1, description="Capacity in GiB: the emptyDir's sizeLimit, "
                          "and the bound the pinned artifacts must fit (rule `size`) for every kind.")  # fmt: skip

    @field_validator("host_path")
    @classmethod
    def _check_host_path(cls, value: str) -> str:
        if not value.startswith("/") or posixpath.normpath(value) != value or value == "/":
            raise ValueError(f"host_path {value!r} must be an absolute, normalised folder other than /")
        return value


def volume(cache: ModelCache) -> dict:
    """The pod volume named `models` (rule `kind`)."""
    if cache.kind == "pvc":
        return {"name": VOLUME_NAME, "persistentVolumeClaim": {"claimName": cache.claim_name}}
    if cache.kind == "host-path":
        return {"name": VOLUME_NAME, "hostPath": {"path": cache.host_path, "type": "DirectoryOrCreate"}}
    return {"name": VOLUME_NAME, "emptyDir": {"sizeLimit": f"{cache.size_gib}Gi"}}


def mount_path(pod_template: dict) -> str:
    """M: where the worker containers mount the `models` volume; every one of them must, at one path."""
    paths = set()
    for container in pod_template["spec"]["containers"]:
        found = [m["mountPath"] for m in container.get("volumeMounts") or [] if m.get("name") == VOLUME_NAME]
        if not found:
            raise ModelCacheError(f"container {container.get('name')!r} of the worker template does not mount the "
                                  f"`{VOLUME_NAME}` volume: add volumeMounts {{name: {VOLUME_NAME}, "
                                  "mountPath: /mnt/models}")  # fmt: skip
        paths.update(found)
    if len(paths) != 1:
        raise ModelCacheError(f"the worker containers mount `{VOLUME_NAME}` at {sorted(paths)}: mount it at one path")
    return paths.pop()


def apply(pod_template: dict, cache: ModelCache, image: str) -> None:
    """Rules `kind` and `owner` on the worker pod template (in place)."""
    spec = pod_template["spec"]
    volumes = list(spec.get("volumes") or [])
    names = [v.get("name") for v in volumes]
    if VOLUME_NAME in names:
        volumes[names.index(VOLUME_NAME)] = volume(cache)  # keeps the template's order
    else:
        volumes.append(volume(cache))
    spec["volumes"] = volumes
    security = dict(spec.get("securityContext") or {})
    security.pop("fsGroup", None)
    security.pop("fsGroupChangePolicy", None)
    if cache.kind == "pvc":
        security.update(fsGroup=RAY_GID, fsGroupChangePolicy="OnRootMismatch")
    if security:
        spec["securityContext"] = security
    else:
        spec.pop("securityContext", None)
    init = [c for c in spec.get("initContainers") or [] if c.get("name") != "model-cache-owner"]
    if cache.kind == "host-path":
        mount = mount_path(pod_template)
        init.append({
            "name": "model-cache-owner",
            "image": image,
            "command": ["chown", f"{RAY_UID}:{RAY_GID}", mount],
            "securityContext": {"runAsUser": 0, "runAsGroup": 0},
            "volumeMounts": [{"name": VOLUME_NAME, "mountPath": mount}],
        })  # fmt: skip
    if init:
        spec["initContainers"] = init
    else:
        spec.pop("initContainers", None)


def check_cache_dirs(cache_dirs: dict[str, str], mount: str) -> None:
    """Rule `under`: cache_dirs maps each GPU pool to its engine's cache_dir."""
    root = posixpath.normpath(mount)
    for pool, cache_dir in cache_dirs.items():
        path = posixpath.normpath(cache_dir)
        if path != root and not path.startswith(root.rstrip("/") + "/"):
            raise ModelCacheError(
                f"pool {pool} caches artifacts in {cache_dir}, outside the model cache volume mounted at {mount}: "
                f"set its engine.cache_dir under {mount} (e.g. {posixpath.join(mount, 'ray-dspine-artifacts')})"
            )


def check_size(pinned: dict[tuple[str, str], int], cache: ModelCache) -> int:
    """Rule `size`: pinned maps (uri, path) to size_bytes; returns the total in bytes."""
    total = sum(pinned.values())
    capacity = cache.size_gib * 2**30
    if total > capacity:
        largest = sorted({uri for uri, _ in pinned}, key=lambda u: -sum(s for (v, _), s in pinned.items() if v == u))
        raise ModelCacheError(
            f"the pinned artifacts take {total:,} bytes ({total / 2**30:.1f} GiB), more than the model cache's "
            f"{cache.size_gib} GiB (largest: {largest[0]}): raise --model-cache-size-gib and the claim's "
            "storage request in clusters/kuberay/model-cache-pvc.yaml"
        )
    return total
