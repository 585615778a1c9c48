"""Render a KubeRay RayService manifest from a template and a Serve config, so the two cannot drift.

Rules (g = GPUs per worker pod, --gpus-per-worker, default 8):
  serve     spec.serveConfigV2 = the Serve config file's text, byte for byte (emitted as a literal block).
  name      metadata.name = --name, else "ray-dspine" for prod.yaml and "ray-dspine-<rest>" for
            prod-<rest>.yaml (any other stem s: "ray-dspine-<s>").
  gpu pools a pool is on GPUs when its replicas reserve num_gpus > 0 (a deployment override's
            ray_actor_options.num_gpus wins); all of them must name one capacity.gpu G, and the worker
            group becomes groupName "<g>-gpu" (G lower-cased), nodeSelector nvidia.com/gpu.product =
            GPU_PRODUCTS[G] (or --gpu-product), `nvidia.com/gpu` limits and requests = g, num-gpus = "g".
  replicas  per GPU pool p with n_p GPUs per replica and bounds (lo_p, hi_p) = the override's
            autoscaling_config (min_replicas, max_replicas), else its num_replicas, else the pool's:
            minReplicas = ceil(sum lo_p * n_p / g), maxReplicas = ceil(sum hi_p * n_p / g), replicas =
            minReplicas. A replica must fit one pod: n_p <= g.
  image     every container of the head and worker templates runs --image.
  host mem  an sglang GPU pool with --enable-hierarchical-cache in its extra_args keeps a HiCache host tier of
            H_p bytes per GPU (engines/sglang/hicache.py, rule H5, on its capacity plan); g * max_p H_p must
            not exceed the worker container's memory limit (else its replicas would be OOM-killed).
            Quantities read as Kubernetes writes them: a plain number, or one of Ki Mi Gi Ti Pi, k M G T P.
  models    the worker pod's `models` volume is the model cache --model-cache selects (model_cache.py: a
            ReadWriteMany claim by default, or a node folder, or a per-pod emptyDir), mounted where the
            template says (/mnt/models); every GPU pool's cache_dir must lie below it, and the config's
            distinct pinned files must fit --model-cache-size-gib.
  metrics   Ray's metrics port is scraped as the template declares it (pod annotations prometheus.io/*,
            a container port named `metrics`, clusters/kuberay/podmonitor.yaml); nothing is rendered.
Output: a header naming the command and the template, then the manifest. Complexity: O(pools + template).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from ray_dspine.capacity import CapacityError
from ray_dspine.config_io import load_app_configs, read_serve_yaml
from ray_dspine.engines.sglang.hicache import enabled as hicache_enabled, plan_host_tier
from ray_dspine.pools import plan_pool

from . import model_cache
from .model_cache import ModelCache, ModelCacheError

DEFAULT_IMAGE = "ray-dspine:0.1.0"
DEFAULT_GPUS_PER_WORKER = 8
# GPU Feature Discovery's `nvidia.com/gpu.product` label of each GPU name used in capacity sections.
GPU_PRODUCTS = {
    "H200": "NVIDIA-H200",
    "H100": "NVIDIA-H100-80GB-HBM3",
    "A100-80GB": "NVIDIA-A100-SXM4-80GB",
}


class RenderError(ValueError):
    """A config or template the renderer cannot use; the message says what to change."""


@dataclass(frozen=True)
class RenderOptions:
    config_path: Path
    template_path: Path
    image: str = DEFAULT_IMAGE
    name: str | None = None
    gpus_per_worker: int = DEFAULT_GPUS_PER_WORKER
    gpu_product: str | None = None
    model_cache: ModelCache = ModelCache()


@dataclass(frozen=True)
class GpuDemand:
    gpu: str
    min_gpus: float
    max_gpus: float
    largest_replica_gpus: float
    host_bytes_per_gpu: int = 0  # the largest HiCache host tier of a GPU pool (rule `host mem`)
    host_pool: str | None = None
    cache_dirs: tuple[tuple[str, str], ...] = ()  # (pool, engine.cache_dir) of each GPU pool (rule `models`)
    pinned_bytes: tuple[tuple[str, str, int], ...] = ()  # (uri, path, size_bytes) of each distinct pinned file


_QUANTITY_UNITS = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "": 1,
}  # fmt: skip


def memory_bytes(quantity) -> int:
    """A Kubernetes memory quantity ("960Gi", "64G", 1024) in bytes (rule `host mem`)."""
    text = str(quantity).strip()
    unit = next((u for u in sorted(_QUANTITY_UNITS, key=len, reverse=True) if u and text.endswith(u)), "")
    try:
        return int(float(text[: len(text) - len(unit)]) * _QUANTITY_UNITS[unit])
    except ValueError:
        raise RenderError(
            f"cannot read the memory quantity {quantity!r}: write it as Kubernetes does, e.g. 960Gi"
        ) from None


def _host_bytes_per_gpu(pool) -> int:
    """Rule `host mem`: the pool's HiCache host tier per GPU, 0 without one."""
    if pool.engine.kind != "sglang" or not hicache_enabled(pool.engine.extra_args):
        return 0
    try:
        plan = plan_pool(pool)
    except CapacityError:  # `ray-dspine check` reports a pool that does not fit (E5)
        return 0
    if plan is None:
        return 0
    tier = plan_host_tier(pool.engine.extra_args, plan)
    return 0 if tier is None else tier.kv_bytes + tier.mamba_bytes


def default_name(config_path: Path) -> str:
    stem = config_path.stem
    if stem == "prod":
        return "ray-dspine"
    return "ray-dspine-" + (stem[len("prod-"):] if stem.startswith("prod-") else stem)


def default_output(config_path: Path) -> Path:
    stem = config_path.stem
    suffix = "" if stem == "prod" else "-" + (stem[len("prod-"):] if stem.startswith("prod-") else stem)
    return config_path.parent / "kuberay" / f"rayservice{suffix}.yaml"


def default_template(config_path: Path) -> Path:
    return config_path.parent / "kuberay" / "template.yaml"


def gpu_demand(config_path: Path) -> GpuDemand:
    """The GPU model and the GPU counts the config's pools need at their replica bounds."""
    document = read_serve_yaml(config_path)
    overrides = {}
    for app in document["applications"]:
        for entry in app.get("deployments") or []:
            overrides[(app.get("name"), entry.get("name"))] = entry
    gpus, low, high, largest = set(), 0.0, 0.0, 0.0
    host_bytes, host_pool = 0, None
    cache_dirs: dict[str, str] = {}
    pinned: dict[tuple[str, str], int] = {}
    for app_name, config in load_app_configs(config_path):
        for pool in config.pools:
            override = overrides.get((app_name, f"pool-{pool.name}"), {})
            per_replica = float((override.get("ray_actor_options") or {}).get("num_gpus", pool.deployment.num_gpus))
            if per_replica <= 0:
                continue
            capacity = getattr(pool.engine, "capacity", None)
            if capacity is None:
                raise RenderError(f"pool {pool.name} reserves GPUs but has no capacity section naming its gpu")
            gpus.add(capacity.gpu)
            autoscaling = override.get("autoscaling_config") or {}
            fixed = override.get("num_replicas", pool.deployment.num_replicas)
            low += autoscaling.get("min_replicas", fixed) * per_replica
            high += autoscaling.get("max_replicas", fixed) * per_replica
            largest = max(largest, per_replica)
            pool_host_bytes = _host_bytes_per_gpu(pool)
            if pool_host_bytes > host_bytes:
                host_bytes, host_pool = pool_host_bytes, pool.name
            if getattr(pool.engine, "cache_dir", None) is not None:
                cache_dirs[pool.name] = pool.engine.cache_dir
            for ref in (getattr(pool.engine, "target", None), getattr(pool.engine, "draft", None)):
                for pin in [] if ref is None or not ref.is_s3 else ref.files:
                    key = (ref.uri.rstrip("/"), pin.path)
                    pinned[key] = max(pinned.get(key, 0), pin.size_bytes or 0)
    if len(gpus) != 1:
        raise RenderError(f"expected the GPU pools of {config_path} to use one GPU model, found {sorted(gpus)}: "
                          "render one manifest per GPU model")  # fmt: skip
    return GpuDemand(
        gpu=gpus.pop(), min_gpus=low, max_gpus=high, largest_replica_gpus=largest,
        host_bytes_per_gpu=host_bytes, host_pool=host_pool, cache_dirs=tuple(sorted(cache_dirs.items())),
        pinned_bytes=tuple((uri, path, size) for (uri, path), size in sorted(pinned.items())),
    )  # fmt: skip


def _worker_group(manifest: dict) -> dict:
    groups = manifest["spec"]["rayClusterConfig"].get("workerGroupSpecs") or []
    if len(groups) != 1:
        raise RenderError(f"the template must have exactly one worker group (the GPU group), found {len(groups)}")
    return groups[0]


def _set_images(pod_template: dict, image: str) -> None:
    spec = pod_template["spec"]
    for container in spec["containers"] + (spec.get("initContainers") or []):
        container["image"] = image


def render_manifest(options: RenderOptions) -> dict:
    """The manifest as data (serveConfigV2 holds the config text)."""
    manifest = yaml.safe_load(options.template_path.read_text(encoding="utf-8"))
    serve_text = options.config_path.read_text(encoding="utf-8")
    demand = gpu_demand(options.config_path)
    g = options.gpus_per_worker
    if demand.largest_replica_gpus > g:
        raise RenderError(f"a replica needs {demand.largest_replica_gpus:g} GPUs but a worker pod has {g}: "
                          "raise --gpus-per-worker")  # fmt: skip
    product = options.gpu_product or GPU_PRODUCTS.get(demand.gpu)
    if product is None:
        raise RenderError(f"no nvidia.com/gpu.product label known for gpu {demand.gpu!r}: pass --gpu-product")
    manifest["metadata"]["name"] = options.name or default_name(options.config_path)
    manifest["spec"]["serveConfigV2"] = serve_text
    cluster = manifest["spec"]["rayClusterConfig"]
    _set_images(cluster["headGroupSpec"]["template"], options.image)
    group = _worker_group(manifest)
    group["groupName"] = f"{demand.gpu.lower()}-gpu"
    group["minReplicas"] = math.ceil(demand.min_gpus / g)
    group["maxReplicas"] = max(group["minReplicas"], math.ceil(demand.max_gpus / g))
    group["replicas"] = group["minReplicas"]
    group["rayStartParams"]["num-gpus"] = str(g)
    pod = group["template"]
    pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"] = product
    _set_images(pod, options.image)
    for container in pod["spec"]["containers"]:
        for kind in ("limits", "requests"):
            container["resources"][kind]["nvidia.com/gpu"] = g
    _check_host_memory(demand, pod, g)
    _apply_model_cache(demand, pod, options)
    return manifest


def _apply_model_cache(demand: GpuDemand, pod: dict, options: RenderOptions) -> None:
    """Rule `models`."""
    try:
        mount = model_cache.mount_path(pod)
        model_cache.check_cache_dirs(dict(demand.cache_dirs), mount)
        model_cache.check_size({(uri, path): size for uri, path, size in demand.pinned_bytes}, options.model_cache)
        model_cache.apply(pod, options.model_cache, options.image)
    except ModelCacheError as exc:
        raise RenderError(str(exc)) from None


def _check_host_memory(demand: GpuDemand, pod: dict, g: int) -> None:
    """Rule `host mem`."""
    if demand.host_bytes_per_gpu == 0:
        return
    need = g * demand.host_bytes_per_gpu
    for container in pod["spec"]["containers"]:
        limit = (container.get("resources") or {}).get("limits", {}).get("memory")
        if limit is not None and need > memory_bytes(limit):
            raise RenderError(
                f"pool {demand.host_pool}'s HiCache host tier takes {demand.host_bytes_per_gpu / 2**30:.1f} GiB of "
                f"host memory per GPU, {need / 2**30:.0f} GiB for a worker pod's {g} GPUs, more than its memory "
                f"limit {limit}: lower --hicache-ratio or set --hicache-size (GB) in the pool's extra_args, or "
                "raise the worker's memory in the template"
            )


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks (`|`), so serveConfigV2 reads like the file it copies."""


def _represent_str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def render_text(options: RenderOptions) -> str:
    manifest = render_manifest(options)
    body = yaml.dump(manifest, Dumper=_BlockDumper, sort_keys=False, width=4096, allow_unicode=True)
    if yaml.safe_load(body)["spec"]["serveConfigV2"] != manifest["spec"]["serveConfigV2"]:
        raise RenderError(f"{options.config_path} cannot be embedded verbatim (tabs or trailing spaces?)")
    config, template = _display(options.config_path), _display(options.template_path)
    header = (
        f"# GENERATED by `ray-dspine render kuberay --config {config}` from {template}.\n"
        f"# Do not edit: change the template or {config}, then re-render (`--check` fails when stale).\n"
        f"# Apply with: kubectl apply -f <this file>\n"
    )
    return header + body
