"""Paths and small builders shared by the deployment tests."""

import copy
import os
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
PROD = REPO / "clusters" / "prod.yaml"
PROD_H100 = REPO / "clusters" / "prod-h100.yaml"
LOCAL = REPO / "clusters" / "local.yaml"
KUBERAY = REPO / "clusters" / "kuberay"


def shared_dir() -> Path:
    """The shared reference folder: $DSPINE_SHARED_DIR, else ../shared next to the repository."""
    return Path(os.environ.get("DSPINE_SHARED_DIR") or REPO.parent / "shared")


def crd_path() -> Path:
    return shared_dir() / "kuberay" / "ray.io_rayservices.yaml"


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def prod_document() -> dict:
    return copy.deepcopy(load(PROD))


def write(tmp_path: Path, document: dict, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def app_args(document: dict) -> dict:
    return document["applications"][0]["args"]


def override(document: dict, name: str) -> dict:
    return next(entry for entry in document["applications"][0]["deployments"] if entry["name"] == name)
