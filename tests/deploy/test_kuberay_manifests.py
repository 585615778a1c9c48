"""RayService manifests: rendered from clusters/prod*.yaml, valid against KubeRay's CRD and Ray's schema."""

import argparse
import json

import pytest
import yaml
from deploy_helpers import KUBERAY, PROD, PROD_H100, REPO, crd_path, load, write
from ray.serve.schema import ServeDeploySchema

from ray_dspine.cli import build_parser
from ray_dspine.deploy import render_cli
from ray_dspine.deploy.check import check_config
from ray_dspine.deploy.crd import load_crd_schema, manifest_errors, strict_schema
from ray_dspine.config_io import load_app_configs
from ray_dspine.deploy.kuberay import (
    RenderError,
    RenderOptions,
    default_output,
    default_template,
    memory_bytes,
    render_manifest,
    render_text,
)
from ray_dspine.deploy.model_cache import DEFAULT_CLAIM, DEFAULT_SIZE_GIB, ModelCache

VARIANTS = {"h200": (PROD, KUBERAY / "rayservice.yaml"), "h100": (PROD_H100, KUBERAY / "rayservice-h100.yaml")}


@pytest.fixture(params=sorted(VARIANTS))
def variant(request, monkeypatch):
    monkeypatch.chdir(REPO)  # the header names repo-relative paths
    return VARIANTS[request.param]


@pytest.fixture(scope="module")
def crd_schema():
    path = crd_path()
    if not path.is_file():
        pytest.skip(f"KubeRay CRD not found at {path} (set DSPINE_SHARED_DIR to the folder holding kuberay/)")
    return load_crd_schema(path)


def render(argv):
    parser = argparse.ArgumentParser()
    render_cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def containers(manifest):
    cluster = manifest["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]] + [group["template"] for group in cluster["workerGroupSpecs"]]
    return [container for pod in pods for container in pod["spec"]["containers"]]


def test_committed_manifest_is_a_fresh_render(variant):
    config, manifest = variant
    assert default_output(config) == manifest and default_template(config) == KUBERAY / "template.yaml"
    text = render_text(RenderOptions(config_path=config.relative_to(REPO), template_path=default_template(config)))
    assert manifest.read_text(encoding="utf-8") == text, "stale: run `ray-dspine render kuberay --config ...`"


def test_serve_config_is_embedded_verbatim_and_valid(variant):
    config, manifest = variant
    embedded = load(manifest)["spec"]["serveConfigV2"]
    assert embedded == config.read_text(encoding="utf-8")
    ServeDeploySchema.model_validate(yaml.safe_load(embedded))


def test_manifest_matches_the_kuberay_crd(variant, crd_schema):
    assert manifest_errors(load(variant[1]), crd_schema) == []


def test_crd_check_is_strict(crd_schema):
    manifest = load(KUBERAY / "rayservice.yaml")
    manifest["spec"]["rayClusterConfig"]["enableInTreeAutoscalng"] = True  # a typo the API server would prune
    manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["maxReplicas"] = "4"
    assert manifest_errors(manifest, crd_schema) == [
        "spec.rayClusterConfig: Additional properties are not allowed ('enableInTreeAutoscalng' was unexpected)",
        "spec.rayClusterConfig.workerGroupSpecs.0.maxReplicas: '4' is not of type 'integer'",
    ]


def test_rule_strip_and_closed():
    port = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
    labels = {"type": "object", "additionalProperties": {"type": "string"}}
    crd_node = {"type": "object", "properties": {"port": port, "labels": labels},
                "x-kubernetes-preserve-unknown-fields": True}  # fmt: skip
    assert strict_schema(crd_node) == {
        "type": "object", "additionalProperties": False,
        "properties": {"port": {"anyOf": [{"type": "integer"}, {"type": "string"}], "type": ["integer", "string"]},
                       "labels": {"type": "object", "additionalProperties": {"type": "string"}}},
    }  # fmt: skip


def test_cluster_shape():
    manifest = load(KUBERAY / "rayservice.yaml")
    spec = manifest["spec"]
    cluster = spec["rayClusterConfig"]
    assert manifest["metadata"]["name"] == "ray-dspine" and spec["upgradeStrategy"] == {"type": "NewCluster"}
    assert cluster["enableInTreeAutoscaling"] is True and cluster["autoscalerOptions"]["upscalingMode"] == "Default"
    head = cluster["headGroupSpec"]
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0" and head["rayStartParams"]["num-cpus"] == "0"
    assert "nvidia.com/gpu" not in head["template"]["spec"]["containers"][0]["resources"]["limits"]
    for container in containers(manifest):
        assert container["image"] == "ray-dspine:0.1.0"
        assert container["readinessProbe"]["exec"] and container["livenessProbe"]["exec"]
        assert "value" not in json.dumps(container.get("env", []))  # secrets come from a Secret, never inline


@pytest.mark.parametrize(
    "manifest_name, gpu_group, product, min_workers, max_workers",
    [
        # H200, 1 GPU per replica: min (2 + 1 + 1) x 1 = 4 GPUs -> ceil(4 / 8) = 1 pod;
        # max (16 + 8 + 4) x 1 = 28 GPUs -> ceil(28 / 8) = 4 pods
        ("rayservice.yaml", "h200-gpu", "NVIDIA-H200", 1, 4),
        # H100, 2 GPUs per replica: min 4 x 2 = 8 -> 1 pod; max 28 x 2 = 56 -> 7 pods
        ("rayservice-h100.yaml", "h100-gpu", "NVIDIA-H100-80GB-HBM3", 1, 7),
    ],
)
def test_rule_gpu_worker_group(manifest_name, gpu_group, product, min_workers, max_workers):
    [group] = load(KUBERAY / manifest_name)["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert (group["groupName"], group["minReplicas"], group["maxReplicas"], group["replicas"]) == (
        gpu_group, min_workers, max_workers, min_workers)
    assert group["rayStartParams"]["num-gpus"] == "8"
    assert group["template"]["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": product}
    resources = group["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == 8


def test_render_check_detects_a_stale_manifest(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert render(["kuberay", "--check"]) == 0
    stale = tmp_path / "rayservice.yaml"
    stale.write_text((KUBERAY / "rayservice.yaml").read_text().replace("maxReplicas: 4", "maxReplicas: 5"))
    assert render(["kuberay", "--check", "--out", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err


def test_render_patch_and_options(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    assert render(["kuberay", "--patch"]) == 0
    patch = json.loads(capsys.readouterr().out)
    assert patch == {"spec": {"serveConfigV2": PROD.read_text(encoding="utf-8")}}
    out = tmp_path / "custom.yaml"
    assert render(["kuberay", "--out", str(out), "--image", "registry.example/ray-dspine:1", "--name", "canary",
                   "--gpus-per-worker", "4"]) == 0  # fmt: skip
    manifest = load(out)
    assert manifest["metadata"]["name"] == "canary"
    assert {c["image"] for c in containers(manifest)} == {"registry.example/ray-dspine:1"}
    # 28 GPUs at most over 4-GPU pods -> 7 pods
    assert manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["maxReplicas"] == 7


def test_render_serve_config_switches_the_drafter_off(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / "drafter-off.yaml"
    assert render(["serve-config", "--drafter-off", "dspine-agent", "--drafter-off", "dflash2", "--out", str(out)]) == 0
    document = load(out)
    overrides = {entry["name"]: entry for entry in document["applications"][0]["deployments"]}
    assert overrides["pool-dspine-agent"]["user_config"] == {"drafter_enabled": False}
    assert overrides["pool-dflash2"]["user_config"] == {"drafter_enabled": False}
    assert "user_config" not in overrides["pool-dspine-reasoning"]
    assert overrides["pool-dspine-agent"]["autoscaling_config"] == load(PROD)["applications"][0]["deployments"][1][
        "autoscaling_config"]  # everything else is kept
    ServeDeploySchema.model_validate(document)
    assert check_config(out).errors == []
    assert render(["serve-config", "--drafter-off", "nope", "--out", str(out)]) == 1


def test_render_refuses_mixed_gpu_models(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    document = load(PROD)
    document["applications"][0]["args"]["pools"][2]["engine"]["capacity"]["gpu"] = "H100"
    config = write(tmp_path, document, "prod-mixed.yaml")
    assert render(["kuberay", "--config", str(config), "--template", str(KUBERAY / "template.yaml"),
                   "--out", str(tmp_path / "x.yaml")]) == 1  # fmt: skip
    assert "one GPU model, found ['H100', 'H200']" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra_args", "rendered"),
    [
        # ratio 2.2: KV 62.2 + Mamba 67.8 = 130.0 GiB per GPU (ray-dspine plan), 8 GPUs: 1,040 GiB > 960Gi
        (["--enable-hierarchical-cache", "--hicache-ratio", "2.2"], False),
        # ratio 2 (SGLang's default): 118.2 GiB per GPU, 946 GiB for 8 GPUs, just fits
        (["--enable-hierarchical-cache"], True),
        # ratio 1: half of it, 486 GiB for 8 GPUs, fits
        (["--enable-hierarchical-cache", "--hicache-ratio", "1"], True),
    ],
)
def test_render_refuses_a_hicache_host_tier_the_worker_pod_cannot_hold(
    tmp_path, monkeypatch, capsys, extra_args, rendered
):
    monkeypatch.chdir(REPO)
    document = load(PROD)
    document["applications"][0]["args"]["pools"][0]["engine"]["extra_args"] = extra_args
    config = write(tmp_path, document, "prod-hicache.yaml")
    argv = ["kuberay", "--config", str(config), "--template", str(KUBERAY / "template.yaml"),
            "--out", str(tmp_path / "x.yaml")]  # fmt: skip
    assert render(argv) == (0 if rendered else 1)
    if not rendered:
        assert (
            "pool dspine-agent's HiCache host tier takes 130.0 GiB of host memory per GPU, 1040 GiB for a worker "
            "pod's 8 GPUs, more than its memory limit 960Gi" in capsys.readouterr().err
        )


def test_memory_quantities_read_as_kubernetes_writes_them():
    assert memory_bytes("960Gi") == 960 * 2**30 and memory_bytes("64G") == 64 * 10**9
    assert memory_bytes(1024) == 1024 and memory_bytes("1.5Ti") == 3 * 2**39
    with pytest.raises(RenderError, match="cannot read the memory quantity 'lots'"):
        memory_bytes("lots")


def test_render_names_a_missing_config(tmp_path, capsys):
    assert render(["kuberay", "--config", str(tmp_path / "nope.yaml")]) == 1
    assert f"--config {tmp_path / 'nope.yaml'}: no such file" in capsys.readouterr().err


def test_render_names_a_missing_template_and_the_shipped_one(tmp_path, capsys):
    config = tmp_path / "prod.yaml"
    config.write_text(PROD.read_text())
    assert render(["kuberay", "--config", str(config)]) == 1
    assert (f"the default template, <config dir>/kuberay/template.yaml, {tmp_path}/kuberay/template.yaml: no such "
            "file; pass --template clusters/kuberay/template.yaml") in capsys.readouterr().err
    out = tmp_path / "rayservice.yaml"
    args = ["kuberay", "--config", str(config), "--template", str(KUBERAY / "template.yaml"), "--out", str(out)]
    assert render(args) == 0
    assert load(out)["kind"] == "RayService"


def test_render_is_a_ray_dspine_command():
    args = build_parser().parse_args(["render", "kuberay", "--check"])
    assert args.func is render_cli.kuberay_main


def test_drafter_off_patch_for_kubectl(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    off = tmp_path / "prod-drafter-off.yaml"
    assert render(["serve-config", "--drafter-off", "dspine-agent", "--out", str(off)]) == 0
    capsys.readouterr()
    assert render(["kuberay", "--config", str(off), "--patch"]) == 0  # needs no template next to the file
    serve_config = yaml.safe_load(json.loads(capsys.readouterr().out)["spec"]["serveConfigV2"])
    overrides = {entry["name"]: entry for entry in serve_config["applications"][0]["deployments"]}
    assert overrides["pool-dspine-agent"]["user_config"] == {"drafter_enabled": False}


# --- model cache (deploy/model_cache.py) ----------------------------------------------------------


def worker_pod(manifest):
    return manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]


def render_with(cache: ModelCache, config=PROD, image="ray-dspine:0.1.0"):
    return render_manifest(RenderOptions(config_path=config, template_path=KUBERAY / "template.yaml", image=image,
                                         model_cache=cache))  # fmt: skip


@pytest.mark.parametrize("manifest_name", ["rayservice.yaml", "rayservice-h100.yaml"])
def test_rule_models_committed_manifests_share_the_pvc(manifest_name):
    pod = worker_pod(load(KUBERAY / manifest_name))
    [cache] = [volume for volume in pod["spec"]["volumes"] if volume["name"] == "models"]
    assert cache == {"name": "models", "persistentVolumeClaim": {"claimName": "ray-dspine-models"}}
    assert pod["spec"]["securityContext"] == {"fsGroup": 100, "fsGroupChangePolicy": "OnRootMismatch"}
    [container] = pod["spec"]["containers"]
    assert {"name": "models", "mountPath": "/mnt/models"} in container["volumeMounts"]
    assert "initContainers" not in pod["spec"]


def test_rule_models_the_pvc_file_is_the_claim_the_manifests_mount():
    claim = load(KUBERAY / "model-cache-pvc.yaml")
    assert (claim["apiVersion"], claim["kind"], claim["metadata"]["name"]) == (
        "v1", "PersistentVolumeClaim", DEFAULT_CLAIM)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # every worker pod on every node mounts it
    assert claim["spec"]["resources"]["requests"]["storage"] == f"{DEFAULT_SIZE_GIB}Gi" == "500Gi"


def test_rule_models_every_gpu_pool_caches_under_the_mount():
    for config in (PROD, PROD_H100):
        for _, app in load_app_configs(config):
            for pool in app.pools:
                assert pool.engine.cache_dir.startswith("/mnt/models/"), (config.name, pool.name)


@pytest.mark.parametrize(
    ("cache", "expected_volume", "security", "init_command"),
    [
        (ModelCache(), {"persistentVolumeClaim": {"claimName": "ray-dspine-models"}},
         {"fsGroup": 100, "fsGroupChangePolicy": "OnRootMismatch"}, None),
        (ModelCache(kind="pvc", claim_name="models-h200"), {"persistentVolumeClaim": {"claimName": "models-h200"}},
         {"fsGroup": 100, "fsGroupChangePolicy": "OnRootMismatch"}, None),
        (ModelCache(kind="host-path", host_path="/data/models"),
         {"hostPath": {"path": "/data/models", "type": "DirectoryOrCreate"}}, None,
         ["chown", "1000:100", "/mnt/models"]),
        (ModelCache(kind="empty-dir", size_gib=300), {"emptyDir": {"sizeLimit": "300Gi"}}, None, None),
    ],
)  # fmt: skip
def test_rule_models_kinds_render_valid_manifests(cache, expected_volume, security, init_command, crd_schema):
    manifest = render_with(cache, image="registry.example/ray-dspine:2")
    assert manifest_errors(manifest, crd_schema) == []
    spec = worker_pod(manifest)["spec"]
    assert [v["name"] for v in spec["volumes"]] == ["dshm", "models"]  # the template's order
    assert spec["volumes"][1] == {"name": "models", **expected_volume}
    assert spec.get("securityContext") == security
    if init_command is None:
        assert "initContainers" not in spec
    else:
        [init] = spec["initContainers"]
        assert init["command"] == init_command and init["image"] == "registry.example/ray-dspine:2"
        assert init["securityContext"] == {"runAsUser": 0, "runAsGroup": 0}
        assert init["volumeMounts"] == [{"name": "models", "mountPath": "/mnt/models"}]


def test_rule_models_a_cache_dir_outside_the_mount_is_refused(tmp_path):
    document = load(PROD)
    document["applications"][0]["args"]["pools"][1]["engine"]["cache_dir"] = "/tmp/ray-dspine-artifacts"
    config = write(tmp_path, document, "prod-tmpcache.yaml")
    with pytest.raises(RenderError) as info:
        render_with(ModelCache(), config=config)
    assert str(info.value) == (
        "pool dspine-reasoning caches artifacts in /tmp/ray-dspine-artifacts, outside the model cache volume "
        "mounted at /mnt/models: set its engine.cache_dir under /mnt/models (e.g. /mnt/models/ray-dspine-artifacts)"
    )


def sized_prod(tmp_path):
    """prod.yaml with 11 target shards of 5,000,000,000 bytes and a 4,060,000,000-byte DSpine drafter."""
    document = load(PROD)
    pools = document["applications"][0]["args"]["pools"]
    for pin in pools[0]["engine"]["target"]["files"]:  # one target, shared by the three pools
        pin["size_bytes"] = 5_000_000_000 if pin["path"].startswith("model-0") else 0
    for pin in pools[0]["engine"]["draft"]["files"]:
        pin["size_bytes"] = 4_060_000_000 if pin["path"] == "model.safetensors" else 0
    for pool in pools:
        pool["engine"]["target"] = pools[0]["engine"]["target"]
        if pool["engine"]["draft"]["uri"] == pools[0]["engine"]["draft"]["uri"]:
            pool["engine"]["draft"] = pools[0]["engine"]["draft"]
    return write(tmp_path, document, "prod-sized.yaml")


def test_rule_models_pinned_files_must_fit_the_cache(tmp_path):
    config = sized_prod(tmp_path)
    # 11 x 5,000,000,000 + 4,060,000,000 = 59,060,000,000 bytes, counted once although three pools pin the
    # target: 56 GiB = 60,129,542,144 bytes holds it, 55 GiB = 59,055,800,320 bytes does not.
    assert worker_pod(render_with(ModelCache(size_gib=56), config=config))
    with pytest.raises(RenderError) as info:
        render_with(ModelCache(size_gib=55), config=config)
    assert str(info.value).startswith(
        "the pinned artifacts take 59,060,000,000 bytes (55.0 GiB), more than the model cache's 55 GiB "
        "(largest: s3://replace-me-model-bucket/qwen3.8-27b): raise --model-cache-size-gib"
    )


def test_render_model_cache_flags(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    out = tmp_path / "hostpath.yaml"
    assert render(["kuberay", "--out", str(out), "--model-cache", "host-path",
                   "--model-cache-host-path", "/data/models"]) == 0  # fmt: skip
    [cache] = [v for v in worker_pod(load(out))["spec"]["volumes"] if v["name"] == "models"]
    assert cache["hostPath"]["path"] == "/data/models"
    capsys.readouterr()
    assert render(["kuberay", "--out", str(out), "--model-cache-host-path", "data/models"]) == 1
    assert "--model-cache-*: host_path: Value error, host_path 'data/models' must be an absolute" in (
        capsys.readouterr().err)
    assert render(["kuberay", "--out", str(out), "--model-cache-size-gib", "1"]) == 0  # placeholders: 0 bytes


# --- metrics scraping ---------------------------------------------------------------------------


@pytest.mark.parametrize("manifest_name", ["rayservice.yaml", "rayservice-h100.yaml"])
def test_every_pod_exposes_rays_metrics_port_to_prometheus(manifest_name):
    manifest = load(KUBERAY / manifest_name)
    monitor = load(KUBERAY / "podmonitor.yaml")
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    cluster = manifest["spec"]["rayClusterConfig"]
    groups = [cluster["headGroupSpec"]] + cluster["workerGroupSpecs"]
    for group in groups:
        port = group["rayStartParams"]["metrics-export-port"]
        pod = group["template"]
        labels = pod["metadata"]["labels"]
        assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert pod["metadata"]["annotations"] == {
            "prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": endpoint["path"]}
        for container in pod["spec"]["containers"]:
            named = {p["name"]: p["containerPort"] for p in container["ports"]}
            assert str(named[endpoint["port"]]) == port == "8080"
