"""deploy/pins.py: placeholder pins and pins without a size, as `ray-dspine check` reports them."""

import hashlib

from ray_dspine.artifacts import ArtifactRef
from ray_dspine.deploy.pins import placeholder_findings


def test_rule_unsized_pins_are_each_named():
    real = {"path": "config.json", "sha256": hashlib.sha256(b"{}").hexdigest(), "size_bytes": 2}
    ref = ArtifactRef(uri="s3://models/qwen/", files=[
        real, {"path": "w1.safetensors", "sha256": "a" * 64}, {"path": "w2.safetensors", "sha256": "b" * 64},
    ])  # fmt: skip
    placeholders, unsized = placeholder_findings(ref, "pools[0].engine.target")
    assert placeholders.message == "2 of 3 sha256 pins are placeholders (w1.safetensors, w2.safetensors)"
    assert (unsized.level, unsized.path) == ("warning", "pools[0].engine.target.files")
    assert unsized.message == ("2 of 3 pins have no size_bytes (w1.safetensors, w2.safetensors): a wrong size is "
                               "then caught only after hashing the whole file")  # fmt: skip
    assert "stat -c %s FILE" in unsized.fix


def test_rule_placeholder_with_size_zero_is_only_a_placeholder():
    ref = ArtifactRef(uri="s3://models/qwen/", files=[{"path": "w.safetensors", "sha256": "0" * 64, "size_bytes": 0}])
    [finding] = placeholder_findings(ref, "t")
    assert finding.message == "1 of 1 sha256 pins are placeholders (all)"


def test_fully_pinned_artifact_has_no_finding():
    data = b"weights"
    ref = ArtifactRef(uri="s3://models/qwen/", files=[
        {"path": "w.safetensors", "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)}])  # fmt: skip
    assert placeholder_findings(ref, "t") == []
