"""Packed-forward cost study (engines/packed_cost.py): a test per rule, values worked by hand."""

import pytest
import torch

from dspine_lab.engines.packed_cost import batching_gain, main, time_packed, variant_name


def test_rule_gain_is_n_steps_alone_over_one_packed_step():
    # 4 requests: alone 34 ms a step each, packed 61 ms for all four -> 4 * 34 / 61 = 2.2295...
    assert batching_gain(34.0, 61.0, 4) == pytest.approx(136 / 61)
    assert batching_gain(30.0, 30.0, 1) == 1.0  # one request is its own reference
    assert batching_gain(10.0, 40.0, 4) == 1.0  # packing that costs n steps gains nothing


def tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=1024, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512,
    )
    return LlamaForCausalLM(config).eval()


def test_rule_every_cell_is_timed_once_warm():
    model = tiny_model()
    seen = []
    times = time_packed([("slab", model, "slab", "engine", False)], [1, 3], [1, 4], cached=20, repeats=2, progress=seen.append)
    assert sorted(times) == [("slab", 1, 1), ("slab", 1, 4), ("slab", 3, 1), ("slab", 3, 4)]
    assert all(t > 0 for t in times.values())
    assert len(seen) == 4 and seen[0].startswith("slab: 1 request(s) x 1 token(s) behind 20 cached")


def test_rule_caches_each_kind_times_every_cell_and_leaves_the_caches_as_filled(monkeypatch):
    import dspine_lab.engines.packed_cost as study

    model, made = tiny_model(), []
    real = study.make_cache

    def spy(kind, capacity):
        made.append(real(kind, capacity))
        return made[-1]

    monkeypatch.setattr(study, "make_cache", spy)
    variants = [("slab", model, "slab", "engine", False), ("dynamic", model, "dynamic", "engine", False)]
    times = time_packed(variants, [1, 2], [3], cached=10, repeats=1, progress=lambda _m: None)
    assert sorted(times) == [("dynamic", 1, 3), ("dynamic", 2, 3), ("slab", 1, 3), ("slab", 2, 3)]
    # two requests per kind, each back at its 10 cached tokens after every forward was cropped
    assert [type(c).__name__ for c in made] == ["SlabCache", "SlabCache", "DynamicCache", "DynamicCache"]
    assert [c.get_seq_length() for c in made] == [10, 10, 10, 10]
    with pytest.raises(ValueError, match="slab or dynamic"):
        study.make_cache("paged", 8)


def test_rule_alone_runs_a_step_alone_as_the_engine_does_or_as_the_model_does(monkeypatch):
    import ray_dspine.engines.embedded.batch as batch

    model, packed = tiny_model(), []
    real = batch.forward_packed

    def spy(model, caches, feeds, logit_rows=None, row_exact=False):
        packed.append(len(caches))
        return real(model, caches, feeds, logit_rows, row_exact)

    monkeypatch.setattr(batch, "forward_packed", spy)
    variants = [("slab-engine", model, "slab", "engine", False), ("slab-model", model, "slab", "model", False)]
    times = time_packed(variants, [1, 2], [1, 3], cached=10, repeats=1, progress=lambda _m: None)
    assert len(times) == 8  # 2 variants x 2 request counts x 2 block lengths
    # (1 warm-up + 1 timed) forwards per variant and cell: n = 1 packs only the engine's variant, and only its
    # 3-token blocks (2 forwards of one request); n = 2 packs both (4 forwards of two each for q = 1 and q = 3)
    assert sorted(packed) == [1, 1] + [2] * 8


def test_variant_names_carry_only_the_dimensions_that_vary():
    assert variant_name("plain", "slab", "engine", ("plain",), ("engine",)) == "slab"
    assert variant_name("packed", "slab", "engine", ("plain", "packed"), ("engine",)) == "packed-slab"
    assert variant_name("plain", "dynamic", "model", ("plain",), ("engine", "model")) == "dynamic-model"
    assert variant_name("packed", "slab", "model", ("packed",), ("engine", "model")) == "packed-slab-model"
    assert variant_name("packed", "slab", "engine", ("packed",), ("engine",), "row", ("segment", "row")) == "packed-slab-row"
    assert variant_name("plain", "slab", "engine", ("plain",), ("engine",), "row", ("row",)) == "slab"


def test_rule_attention_row_runs_every_packed_forward_of_its_variant_row_exact(monkeypatch):
    import ray_dspine.engines.embedded.batch as batch

    model, seen = tiny_model(), []
    real = batch.forward_packed

    def spy(model, caches, feeds, logit_rows=None, row_exact=False):
        seen.append((len(caches), row_exact))
        return real(model, caches, feeds, logit_rows, row_exact)

    monkeypatch.setattr(batch, "forward_packed", spy)
    variants = [("slab", model, "slab", "engine", False), ("slab-row", model, "slab", "engine", True)]
    time_packed(variants, [1, 2], [3], cached=10, repeats=1, progress=lambda _m: None)
    # per cell, 1 warm-up + 1 timed forward per variant, alternating: segment first, then row
    assert seen == [(1, False), (1, True)] * 2 + [(2, False), (2, True)] * 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--requests", "two"], "--requests must be comma-separated integers"),
        (["--tokens", "0"], "--tokens needs one or more integers >= 1"),
        (["--cached", "-1"], "--cached must be >= 0"),
        (["--repeats", "0"], "--repeats and --threads must be >= 1"),
        (["--cache", "paged"], "--cache takes slab, dynamic or both"),
        (["--weights", "int8"], "--weights takes plain, packed or both"),
        (["--weights", "plain,packed"], "--weights packed needs --dtype bf16"),
        (["--alone", "eager"], "--alone takes engine, model or both"),
        (["--attention", "flash"], "--attention takes segment, row or both"),
        (["--attention", "segment,row"], "--attention row is the engine's row_exact, which is bf16 only"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
