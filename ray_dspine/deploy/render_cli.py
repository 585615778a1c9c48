"""`ray-dspine render kuberay` and `ray-dspine render serve-config`: deployment files from a Serve config.

  render kuberay        the RayService manifest (template + config); --check exits 1 when the file on disk
                        differs from a fresh render; --patch prints a JSON merge patch of serveConfigV2 for
                        `kubectl patch rayservice NAME --type merge --patch-file FILE`. --model-cache picks
                        the worker pods' model cache volume (deploy/model_cache.py): pvc (default, the claim
                        of clusters/kuberay/model-cache-pvc.yaml), host-path or empty-dir.
  render serve-config   a copy of a Serve config with `user_config: {drafter_enabled: false}` on the named
                        pools' deployments (for `serve deploy` or, through render kuberay --patch, kubectl).
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

import yaml
from pydantic import ValidationError

from ray_dspine.config_io import ConfigFileError, load_app_configs, read_serve_yaml

from .kuberay import (
    DEFAULT_GPUS_PER_WORKER,
    DEFAULT_IMAGE,
    RenderError,
    RenderOptions,
    default_output,
    default_template,
    render_text,
)
from .model_cache import DEFAULT_CLAIM, DEFAULT_HOST_PATH, DEFAULT_SIZE_GIB, MODEL_CACHE_KINDS, ModelCache

DEFAULT_CONFIG = "clusters/prod.yaml"


def register(subparsers) -> None:
    kuberay = subparsers.add_parser("kuberay", help="render the KubeRay RayService manifest of a Serve config")
    kuberay.add_argument("--config", default=DEFAULT_CONFIG, help=f"Serve config to embed (default {DEFAULT_CONFIG})")
    kuberay.add_argument("--out", help="output file (default <config dir>/kuberay/rayservice[-<suffix>].yaml)")
    kuberay.add_argument("--template", help="manifest template (default <config dir>/kuberay/template.yaml)")
    kuberay.add_argument("--image", default=DEFAULT_IMAGE, help=f"container image (default {DEFAULT_IMAGE})")
    kuberay.add_argument("--name", help="RayService name (default from the config file name)")
    kuberay.add_argument("--gpus-per-worker", type=int, default=DEFAULT_GPUS_PER_WORKER, help="GPUs per worker pod")
    kuberay.add_argument("--gpu-product", help="nvidia.com/gpu.product node label (default from the pools' gpu)")
    kuberay.add_argument("--model-cache", choices=MODEL_CACHE_KINDS, default="pvc",
                         help="worker pods' model cache at /mnt/models: pvc (a ReadWriteMany claim all pods share, "
                              "default), host-path (a folder on each node), empty-dir (per pod, re-downloaded)")
    kuberay.add_argument("--model-cache-claim", default=DEFAULT_CLAIM,
                         help=f"PersistentVolumeClaim name for --model-cache pvc (default {DEFAULT_CLAIM})")
    kuberay.add_argument("--model-cache-host-path", default=DEFAULT_HOST_PATH,
                         help=f"node folder for --model-cache host-path (default {DEFAULT_HOST_PATH})")
    kuberay.add_argument("--model-cache-size-gib", type=int, default=DEFAULT_SIZE_GIB,
                         help=f"cache capacity in GiB: emptyDir sizeLimit, and the bound the pinned files must fit "
                              f"(default {DEFAULT_SIZE_GIB})")  # fmt: skip
    mode = kuberay.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if --out differs from a fresh render")
    mode.add_argument("--patch", action="store_true", help="print a JSON merge patch of spec.serveConfigV2")
    kuberay.set_defaults(func=kuberay_main)

    serve_config = subparsers.add_parser(
        "serve-config", help="a Serve config with the drafter switched off in some pools (user_config)"
    )
    serve_config.add_argument("--config", default=DEFAULT_CONFIG, help=f"Serve config (default {DEFAULT_CONFIG})")
    serve_config.add_argument("--drafter-off", action="append", required=True, metavar="POOL",
                              help="pool whose replicas decode autoregressively (repeatable)")  # fmt: skip
    serve_config.add_argument("--out", help="output file (default stdout)")
    serve_config.set_defaults(func=serve_config_main)


def kuberay_main(args) -> int:
    config = Path(args.config)
    if not config.is_file():
        print(f"ray-dspine render kuberay: --config {config}: no such file (default {DEFAULT_CONFIG})", file=sys.stderr)
        return 1
    if args.patch:
        try:
            load_app_configs(config)
        except ConfigFileError as exc:
            print(f"ray-dspine render kuberay: {exc}", file=sys.stderr)
            return 1
        print(json.dumps({"spec": {"serveConfigV2": config.read_text(encoding="utf-8")}}))
        return 0
    try:
        cache = ModelCache(kind=args.model_cache, claim_name=args.model_cache_claim,
                           host_path=args.model_cache_host_path, size_gib=args.model_cache_size_gib)  # fmt: skip
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        print(f"ray-dspine render kuberay: --model-cache-*: {problems}", file=sys.stderr)
        return 1
    template = Path(args.template) if args.template else default_template(config)
    if not template.is_file():
        origin = "--template" if args.template else "the default template, <config dir>/kuberay/template.yaml,"
        print(f"ray-dspine render kuberay: {origin} {template}: no such file; pass --template "
              "clusters/kuberay/template.yaml (the repository's) or a copy of it", file=sys.stderr)
        return 1
    options = RenderOptions(
        config_path=config, template_path=template,
        image=args.image, name=args.name, gpus_per_worker=args.gpus_per_worker, gpu_product=args.gpu_product,
        model_cache=cache,
    )  # fmt: skip
    try:
        text = render_text(options)
    except (RenderError, ConfigFileError, OSError) as exc:
        print(f"ray-dspine render kuberay: {exc}", file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else default_output(config)
    if args.check:
        current = out.read_text(encoding="utf-8") if out.is_file() else ""
        if current == text:
            print(f"{out}: up to date with {config}")
            return 0
        diff = difflib.unified_diff(current.splitlines(), text.splitlines(), str(out), "rendered", lineterm="", n=1)
        print("\n".join(list(diff)[:60]), file=sys.stderr)
        print(f"{out}: stale; run `ray-dspine render kuberay --config {config} --out {out}`", file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}")
    return 0


def drafter_off_document(config_path: Path, pools: list[str]) -> dict:
    """The config with `user_config: {drafter_enabled: false}` on each named pool's deployment override."""
    document = read_serve_yaml(config_path)
    names = {pool.name for _, config in load_app_configs(config_path) for pool in config.pools}
    unknown = sorted(set(pools) - names)
    if unknown:
        raise ConfigFileError(f"{config_path}: no pool named {unknown}; pools are {sorted(names)}")
    for app in document["applications"]:
        if not str(app.get("import_path", "")).startswith("ray_dspine."):
            continue
        overrides = app.setdefault("deployments", [])
        for pool in pools:
            name = f"pool-{pool}"
            entry = next((e for e in overrides if e.get("name") == name), None)
            if entry is None:
                entry = {"name": name}
                overrides.append(entry)
            entry["user_config"] = {"drafter_enabled": False}
    return document


def serve_config_main(args) -> int:
    config = Path(args.config)
    try:
        document = drafter_off_document(config, args.drafter_off)
    except ConfigFileError as exc:
        print(f"ray-dspine render serve-config: {exc}", file=sys.stderr)
        return 1
    header = (f"# {config.as_posix()} with the drafter off in: {', '.join(args.drafter_off)} "
              "(ray-dspine render serve-config)\n")  # fmt: skip
    text = header + yaml.safe_dump(document, sort_keys=False, width=4096)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    else:
        sys.stdout.write(text)
    return 0
