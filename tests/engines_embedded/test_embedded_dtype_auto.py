"""Rule `dtype auto` (model.py): bf16 with row_exact where the CPU has bf16 matrix instructions and keeps rows
apart, else fp32 with the reason logged; the engine then runs as its model was loaded."""

import asyncio
import dataclasses
import logging

import pytest

import ray_dspine.engines.embedded.model as model_module
from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
from ray_dspine.engines.embedded.engine import EmbeddedEngine
from ray_dspine.engines.embedded.model import RowExactUnavailable, load_model


def test_config_names_what_dtype_auto_needs():
    with pytest.raises(ValueError, match="dtype: auto chooses row_exact itself: drop row_exact"):
        EmbeddedEngineConfig(dtype="auto", row_exact=True)
    with pytest.raises(ValueError, match="dtype: auto may choose row_exact, which runs on packed weights"):
        EmbeddedEngineConfig(dtype="auto", packed_weights=False)
    # row_exact's limits hold for auto, which may choose it
    with pytest.raises(ValueError, match=r"dtype: auto \(which may choose row_exact\) reuses whole prefill chunks"):
        EmbeddedEngineConfig(dtype="auto", prefix_block_tokens=48)
    with pytest.raises(ValueError, match="set max_batch_requests to at most 32 .it is 33."):
        EmbeddedEngineConfig(dtype="auto", max_batch_requests=33)
    assert EmbeddedEngineConfig(dtype="auto").dtype == "auto"


class _Loads:
    """Stands in for model._load: records each config it is asked for; refuses row_exact when told to."""

    def __init__(self, rows_apart: bool):
        self.rows_apart = rows_apart
        self.asked: list[tuple[str, bool]] = []

    def __call__(self, config):
        self.asked.append((config.dtype, config.row_exact))
        if config.row_exact and not self.rows_apart:
            raise RowExactUnavailable("model.layers.0.mlp.up_proj gives rows fed 9 at a time other bits than fed alone")
        return config.dtype, config.row_exact


def test_auto_loads_bf16_with_row_exact_where_the_cpu_has_bf16_and_keeps_rows_apart(monkeypatch):
    loads = _Loads(rows_apart=True)
    monkeypatch.setattr(model_module, "_load", loads)
    monkeypatch.setattr(model_module, "bf16_unsupported", lambda: None)
    assert load_model(EmbeddedEngineConfig(dtype="auto")) == ("bf16", True)
    assert loads.asked == [("bf16", True)]


def test_auto_falls_back_to_fp32_where_rows_mix_and_logs_why(monkeypatch, caplog):
    loads = _Loads(rows_apart=False)
    monkeypatch.setattr(model_module, "_load", loads)
    monkeypatch.setattr(model_module, "bf16_unsupported", lambda: None)
    with caplog.at_level(logging.WARNING, logger=model_module.__name__):
        assert load_model(EmbeddedEngineConfig(dtype="auto")) == ("fp32", False)
    assert loads.asked == [("bf16", True), ("fp32", False)]
    assert "dtype auto: fp32, because model.layers.0.mlp.up_proj gives rows fed 9 at a time" in caplog.text


def test_auto_falls_back_to_fp32_without_trying_bf16_where_the_cpu_lacks_it(monkeypatch, caplog):
    loads = _Loads(rows_apart=True)
    monkeypatch.setattr(model_module, "_load", loads)
    monkeypatch.setattr(model_module, "bf16_unsupported", lambda: "no bf16 here")
    with caplog.at_level(logging.WARNING, logger=model_module.__name__):
        assert load_model(EmbeddedEngineConfig(dtype="auto")) == ("fp32", False)
    assert loads.asked == [("fp32", False)]
    assert "dtype auto: fp32, because no bf16 here" in caplog.text


def test_a_set_dtype_loads_as_asked(monkeypatch):
    loads = _Loads(rows_apart=False)
    monkeypatch.setattr(model_module, "_load", loads)
    monkeypatch.setattr(model_module, "bf16_unsupported", lambda: "no bf16 here")
    assert load_model(EmbeddedEngineConfig(dtype="bf16")) == ("bf16", False)
    assert load_model(EmbeddedEngineConfig(dtype="fp32")) == ("fp32", False)


@pytest.mark.parametrize(
    ("dtype", "row_exact", "hit_unit_blocks"),
    # row exact reuses whole 512-token chunks: 512 / 16-token blocks = 32 blocks per hit unit
    [("bf16", True, 32), ("fp32", False, 1)],
)
def test_an_auto_engine_runs_as_its_model_was_loaded(tiny, dtype, row_exact, hit_unit_blocks):
    loaded = dataclasses.replace(tiny, dtype=dtype, row_exact=row_exact)
    engine = EmbeddedEngine(EmbeddedEngineConfig(dtype="auto", prefix_block_tokens=16), loader=lambda _c: loaded)
    assert engine.config.dtype == "auto"

    async def started():
        await engine.start()
        await engine.stop()

    asyncio.run(started())
    assert (engine.config.dtype, engine.config.row_exact) == (dtype, row_exact)
    assert engine.describe()["args"]["dtype"] == dtype
    assert engine._admission.hit_unit_blocks == hit_unit_blocks


def test_the_real_model_loads_as_it_says_on_this_machine():
    import torch

    from ray_dspine.engines.embedded.packed_weights import rows_apart

    loaded = load_model(EmbeddedEngineConfig(dtype="auto"))
    weights = loaded.model.get_input_embeddings().weight.dtype
    if loaded.dtype == "bf16":
        assert loaded.row_exact and weights == torch.bfloat16
        assert model_module.bf16_unsupported() is None and rows_apart(loaded.model, 32) is None
    else:
        assert (loaded.dtype, loaded.row_exact, weights) == ("fp32", False, torch.float32)
