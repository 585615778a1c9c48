"""Debian's `prometheus` package (prometheus and promtool), installed on first use when missing."""

import shutil
import subprocess

import pytest


def prometheus_tool(name: str) -> str:
    """The path of `name` (prometheus or promtool), after `apt-get install -y prometheus` if need be."""
    found = shutil.which(name)
    if found:
        return found
    for command in (["apt-get", "install", "-y", "prometheus"], ["apt-get", "update"],
                    ["apt-get", "install", "-y", "prometheus"]):  # fmt: skip
        subprocess.run(command, capture_output=True, timeout=600, check=False)
        if shutil.which(name):
            break
    found = shutil.which(name)
    if not found:
        pytest.skip(f"Debian package `prometheus` ({name}) is not installed and `apt-get install -y prometheus` failed")
    return found
