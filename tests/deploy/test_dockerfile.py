"""The serving image's Dockerfile (no Docker daemon here: its text is checked)."""

import re

from deploy_helpers import REPO

DOCKERFILE = (REPO / "Dockerfile").read_text(encoding="utf-8")


def test_base_image_is_ray_2_60_with_python_3_11():
    [base] = re.findall(r"^ARG RAY_IMAGE=(\S+)$", DOCKERFILE, re.M)
    assert base.startswith("rayproject/ray:2.60.0-py311-")
    assert re.search(r"^FROM \$\{RAY_IMAGE\}$", DOCKERFILE, re.M)


def test_installs_sglang_the_plugin_and_this_package():
    assert re.search(r"^ARG SGLANG_VERSION=0\.5\.23$", DOCKERFILE, re.M)
    assert '"sglang==${SGLANG_VERSION}"' in DOCKERFILE
    assert re.search(r"^ARG DSPINE_PLUGIN_SPEC=\"\"$", DOCKERFILE, re.M) and '"${DSPINE_PLUGIN_SPEC}"' in DOCKERFILE
    assert "group='sglang.srt.plugins'" in DOCKERFILE  # the build proves the plugin registered
    # ... and that SGLang itself resolves every algorithm the pools use (judge.py's --require-algorithm mode,
    # exercised with a real entry-point plugin in tests/sglang_contract/test_command_lines.py)
    assert "python -m ray_dspine.engines.sglang.judge --require-algorithm DSPINE DFLASH" in DOCKERFILE
    assert '".[gpu]"' in DOCKERFILE  # the router and policy classes must import in the image:
    assert "import ray_dspine.routing.ray_router, ray_dspine.autoscale.ray_policy" in DOCKERFILE


def test_no_secrets_and_no_root_at_run_time():
    assert not re.search(r"(AWS_SECRET|AWS_ACCESS_KEY_ID|API_KEY|TOKEN|PASSWORD)\s*=", DOCKERFILE, re.I)
    users = re.findall(r"^USER (\S+)$", DOCKERFILE, re.M)
    assert users[-1] == "ray"
