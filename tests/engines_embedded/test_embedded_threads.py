import pytest
from pydantic import ValidationError

from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
from ray_dspine.engines.embedded.model import resolve_num_threads


def test_rule_default_threads_divide_the_cores_among_pools():
    assert resolve_num_threads(None, pools_per_machine=2, cores=2) == 1  # two pools on a 2-core machine
    assert resolve_num_threads(None, pools_per_machine=2, cores=8) == 4
    assert resolve_num_threads(None, pools_per_machine=1, cores=2) == 2
    assert resolve_num_threads(None, pools_per_machine=3, cores=2) == 1  # never below one thread


def test_rule_explicit_threads_win():
    assert resolve_num_threads(4, pools_per_machine=2, cores=2) == 4


def test_config_defaults_and_bounds():
    config = EmbeddedEngineConfig()
    assert config.num_threads is None and config.pools_per_machine == 1 and config.prefix_reuse
    with pytest.raises(ValidationError):
        EmbeddedEngineConfig(pools_per_machine=0)
    with pytest.raises(ValidationError):
        EmbeddedEngineConfig(prefix_block_tokens=0)
    with pytest.raises(ValidationError):
        EmbeddedEngineConfig(draft_cost_ratio_prior=-1)
    with pytest.raises(ValidationError):
        EmbeddedEngineConfig(unknown_field=1)
