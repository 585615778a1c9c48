"""Fixtures for the SGLang engine tests (helpers live in sglang_double_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_double_helpers import config_factory


@pytest.fixture
def make_config(tmp_path: Path):
    return config_factory(tmp_path)
