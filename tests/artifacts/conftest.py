"""Artifact tests run against the session's local S3 gateway (`s3_env` in tests/conftest.py)."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def s3_bucket(s3_env):
    """A fresh bucket on the local gateway and a client for it."""
    from ray_dspine.artifacts import make_s3_client

    client = make_s3_client()
    bucket = f"dspine-artifacts-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket
