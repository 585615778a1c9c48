# The serving image: Ray 2.60 + SGLang 0.5.23 + Tencent's DSpine plugin + this package.
#
#   docker build -t ray-dspine:0.1.0 --build-arg DSPINE_PLUGIN_SPEC='<pip requirement of the plugin>' .
#   ray-dspine render kuberay --image <registry>/ray-dspine:0.1.0
#
# Every node of the Ray cluster runs this image. The head must have the package too: under KubeRay the
# head's dashboard imports the router and autoscaling-policy classes named in serveConfigV2, and a
# runtime_env alone makes the deploy fail with HTTP 500. No secret is baked in: S3 credentials and the
# API key arrive at run time from the environment (see clusters/kuberay/template.yaml).

# Ray's image tags read {ray version}-{python}-{platform}: cuXYZ pins a CUDA toolkit, `gpu` aliases Ray's
# default CUDA image. SGLang's wheels after 0.5.19 are built for CUDA 13 only (its install guide), so
# take a CUDA 13 base; the nodes' NVIDIA driver must support CUDA 13 (driver 580 or newer). If a registry
# lacks the cu130 tag, `--build-arg RAY_IMAGE=rayproject/ray:2.60.0-py311-gpu` also works at run time: the
# torch wheel SGLang pins carries its own CUDA 13 libraries.
ARG RAY_IMAGE=rayproject/ray:2.60.0-py311-cu130
FROM ${RAY_IMAGE}

# Tencent's DSpine drafter is an out-of-tree speculative algorithm: its package registers `DSPINE`
# through SGLang's `sglang.srt.plugins` entry point (SpeculativeAlgorithm.register). Its distribution
# name is not published with the model card, so give its pip requirement here: a PyPI name with an exact
# version, a wheel URL, or `git+https://...@<commit>`. The build fails without it (DSpine pools cannot start).
ARG DSPINE_PLUGIN_SPEC=""
ARG SGLANG_VERSION=0.5.23

USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends wget ca-certificates \
    && rm -rf /var/lib/apt/lists/*
USER ray
WORKDIR /home/ray/ray-dspine

# SGLang first (the heaviest layer, rebuilt only when its version changes). Some of its dependencies
# publish only pre-releases on PyPI; uv older than 0.12 would then silently pick an old SGLang, so pin
# both. `--prerelease=allow` admits those dependencies; SGLang itself stays at the exact version.
RUN pip install --no-cache-dir "uv>=0.12" \
    && uv pip install --system --no-cache --prerelease=allow "sglang==${SGLANG_VERSION}"

RUN if [ -z "${DSPINE_PLUGIN_SPEC}" ]; then \
        echo "set --build-arg DSPINE_PLUGIN_SPEC=<pip requirement of Tencent's DSpine SGLang plugin>" >&2; \
        exit 1; \
    fi \
    && uv pip install --system --no-cache --prerelease=allow "${DSPINE_PLUGIN_SPEC}" \
    && python -c "from importlib.metadata import entry_points as e; \
names = [p.name for p in e(group='sglang.srt.plugins')]; \
assert names, 'the DSpine package registers no sglang.srt.plugins entry point'; \
print('sglang.srt.plugins:', names)"

# This package with its GPU extra (pins sglang==0.5.23 again, so a mismatch fails the build).
COPY --chown=ray:users pyproject.toml README.md ./
COPY --chown=ray:users ray_dspine ./ray_dspine
# The build fails unless SGLang itself, after loading its plugins, resolves every algorithm the pools use.
RUN uv pip install --system --no-cache --prerelease=allow ".[gpu]" \
    && python -c "import ray_dspine.routing.ray_router, ray_dspine.autoscale.ray_policy, sglang; \
print('sglang', sglang.__version__)" \
    && python -m ray_dspine.engines.sglang.judge --require-algorithm DSPINE DFLASH

# Serve configs for `serve run` inside the cluster (KubeRay passes serveConfigV2 instead).
COPY --chown=ray:users clusters ./clusters
