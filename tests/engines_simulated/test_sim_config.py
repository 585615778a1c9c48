"""Config bounds and profile look-ups fail loudly."""

import random

import pytest
from pydantic import ValidationError

from ray_dspine.engines.simulated import SimReplicaCore, SimulatedEngineConfig, load_profile


def test_config_forbids_unknown_fields_and_bounds_time_scale():
    with pytest.raises(ValidationError):
        SimulatedEngineConfig(unknown=1)
    with pytest.raises(ValidationError):
        SimulatedEngineConfig(time_scale=0.0)
    with pytest.raises(ValidationError):
        SimulatedEngineConfig(time_scale=1000.5)
    assert SimulatedEngineConfig(time_scale=1000.0).prefix_block_tokens == 512


def test_unknown_workload_is_named_in_the_error():
    config = SimulatedEngineConfig(workload="nope")
    with pytest.raises(KeyError, match="gsm8k-greedy"):
        SimReplicaCore(config, load_profile(config.profile), random.Random(0))


def test_gsm8k_workload_uses_its_own_acceptance():
    profile = load_profile("h200-qwen3.8-27b")
    assert profile.accept_length_mean("dspine", "gsm8k-greedy") == 7.20
    assert profile.accept_length_mean("dflash2", "gsm8k-greedy") == 5.69
    assert profile.accept_length_mean("none", "anything") == 1.0
