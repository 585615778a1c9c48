"""Rule `row exact` (batch.py, config row_exact): rows cut to fit, attention one query row at a time, the
rows-apart check at load, and greedy output with the real model in bf16."""

import asyncio
import copy

import pytest
import torch

import ray_dspine.engines.embedded.batch as batch
from ray_dspine.engines.embedded.batch import fit_rows, forward_packed
from ray_dspine.engines.embedded.config import ROW_EXACT_MAX_ROWS, EmbeddedEngineConfig
from ray_dspine.engines.embedded.engine import EmbeddedEngine
from ray_dspine.engines.embedded.kv_cache import SlabCache
from ray_dspine.engines.embedded.packed_weights import PackedLinear, can_pack, pack_linears, rows_apart, unpacked_reason
from ray_dspine.engines.protocol import ChatMessage, GenerateRequest

needs_onednn = pytest.mark.skipif(not can_pack(torch.bfloat16), reason=str(unpacked_reason()))


def test_fit_rows_gives_out_draft_rows_evenly_by_hand():
    drafts = [list(range(31)), list(range(31)), list(range(5)), []]
    # 32 rows, 4 for the requests' last tokens: 28 draft rows; cap 11 takes 11 + 11 + 5 + 0 = 27, and the
    # one row left goes to the first draft longer than 11
    assert [len(d) for d in fit_rows(drafts, 32)] == [12, 11, 5, 0]
    assert fit_rows(drafts, 32)[0] == list(range(12))  # a draft keeps its first tokens
    assert fit_rows([[1, 2], [3]], 32) == [[1, 2], [3]]  # drafts that fit stay whole
    assert fit_rows([list(range(40))], 32) == [list(range(31))]  # alone: 31 draft tokens and its last token
    assert fit_rows([[1, 2], [3, 4]], 2) == [[], []]  # only the requests' own rows fit
    with pytest.raises(ValueError, match="3 requests need 3 rows, more than 2"):
        fit_rows([[], [], []], 2)


def test_config_names_what_row_exact_needs():
    with pytest.raises(ValueError, match="row_exact needs dtype: bf16 and packed_weights: true"):
        EmbeddedEngineConfig(row_exact=True, dtype="fp32")
    with pytest.raises(ValueError, match="row_exact needs dtype: bf16 and packed_weights: true"):
        EmbeddedEngineConfig(row_exact=True, packed_weights=False)
    with pytest.raises(ValueError, match=f"set max_batch_requests to at most {ROW_EXACT_MAX_ROWS}"):
        EmbeddedEngineConfig(row_exact=True, max_batch_requests=ROW_EXACT_MAX_ROWS + 1)
    with pytest.raises(ValueError, match="set prefix_block_tokens to a divisor of 512 .it is 48."):
        EmbeddedEngineConfig(row_exact=True, prefix_block_tokens=48)
    with pytest.raises(ValueError, match="chunks of 96 tokens: set prefix_block_tokens to a divisor of 96 .it is 64."):
        EmbeddedEngineConfig(row_exact=True, prefill_chunk_tokens=96, prefix_block_tokens=64)
    chunked = EmbeddedEngineConfig(row_exact=True, prefill_chunk_tokens=96, prefix_block_tokens=32)
    assert chunked.prefill_chunk_tokens == 96
    # without reuse any block size goes, even one longer than a chunk
    loose = EmbeddedEngineConfig(row_exact=True, prefix_block_tokens=1024, prefix_reuse=False)
    assert EmbeddedEngine(loose, loader=lambda _c: None).config.row_exact
    assert EmbeddedEngineConfig(row_exact=True).row_exact


def _bf16_packed(tiny):
    model = copy.deepcopy(tiny.model).to(torch.bfloat16)
    pack_linears(model)
    return model


def _prefilled(model, ids):
    cache = SlabCache(128)
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return cache


@needs_onednn
def test_each_row_of_a_row_exact_forward_is_a_one_token_step_s_bits(tiny):
    model = _bf16_packed(tiny)
    prompts, blocks = [[1, 2, 3, 4, 5, 6, 7], [9, 8, 7, 6]], [[11, 12, 13, 14, 15, 16], [21, 22, 23]]
    with torch.inference_mode():
        singles, single_caches = [], []
        for prompt, block in zip(prompts, blocks):
            cache = _prefilled(model, prompt)
            singles.append(torch.cat([model(input_ids=torch.tensor([[t]]), past_key_values=cache).logits[0] for t in block]))
            single_caches.append(cache)
        caches = [_prefilled(model, p) for p in prompts]
        packed = forward_packed(model, caches, blocks, row_exact=True)  # two requests, 9 rows
    for got, want in zip(packed, singles):
        assert torch.equal(got, want)
    for cache, reference in zip(caches, single_caches):
        assert torch.equal(cache.layers[1].keys, reference.layers[1].keys)
        assert torch.equal(cache.layers[1].values, reference.layers[1].values)


@needs_onednn
def test_row_exact_attention_takes_one_query_row_over_the_keys_it_may_see(tiny, monkeypatch):
    model = _bf16_packed(tiny)
    calls, real = [], torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, **kwargs):
        calls.append((query.shape[2], key.shape[2], attn_mask is None))
        return real(query, key, value, attn_mask=attn_mask, **kwargs)

    cache = _prefilled(model, [1, 2, 3, 4, 5])
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    with torch.inference_mode():
        forward_packed(model, [cache], [[6, 7, 8]], row_exact=True)
    # per layer (2): rows 0, 1, 2 over 5 cached keys and the new ones up to each, no mask
    assert calls == [(1, 6, True), (1, 7, True), (1, 8, True)] * 2
    calls.clear()
    with torch.inference_mode():
        forward_packed(model, [cache], [[9, 10]])  # without the rule: one call per layer, a 2 x 10 mask
    assert calls == [(2, 10, False)] * 2


@needs_onednn
def test_rows_apart_names_a_layer_whose_rows_mix(tiny):
    model = _bf16_packed(tiny)
    assert rows_apart(model, 8) is None
    layer = model.model.layers[0].mlp.down_proj
    assert isinstance(layer, PackedLinear)
    plain = layer.forward
    layer.forward = lambda x: plain(x) + (0.5 if x.shape[-2] > 1 else 0.0)  # rows fed together come out shifted
    assert rows_apart(model, 8) == "model.layers.0.mlp.down_proj gives rows fed 2 at a time other bits than fed alone"


@needs_onednn
def test_engine_under_row_exact_keeps_forwards_within_the_rows_and_chunks_alone(tiny, monkeypatch):
    import ray_dspine.engines.embedded.engine as engine_module
    from ray_dspine.engines.embedded.model import LoadedModel

    loaded = LoadedModel(_bf16_packed(tiny), tiny.tokenizer, tiny.path, tiny.sha256, tiny.eos_token_ids, 512)
    texts = ["abcabcabcabcabcabcabcabc", "xyzxyzxyzxyzxyzxyzxyz", "hello hello hello hello", "0101010101010101"]
    calls, real = [], engine_module.forward_packed

    def spy(model, caches, feeds, logit_rows=None, row_exact=False):
        calls.append(([len(f) for f in feeds], row_exact))
        return real(model, caches, feeds, logit_rows, row_exact)

    def run(together: bool, **overrides):
        config = EmbeddedEngineConfig(
            row_exact=True, adaptive_draft=False, num_draft_tokens=16, context_length_tokens=256,
            kv_budget_tokens=2048, prefix_block_tokens=8, **overrides,
        )

        async def main():
            engine = EmbeddedEngine(config, loader=lambda _c: loaded)
            await engine.start()

            async def one(i, text):
                request = GenerateRequest(request_id=f"r{i}", prompt=text, max_tokens=30)
                return "".join([c.text async for c in engine.generate(request)])

            try:
                if together:
                    return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(texts))))
                return [await one(i, t) for i, t in enumerate(texts)]
            finally:
                await engine.stop()

        return asyncio.run(main())

    reference = run(False, speculative=False, max_batch_requests=1)
    monkeypatch.setattr(engine_module, "forward_packed", spy)
    monkeypatch.setattr(engine_module, "ROW_EXACT_MAX_ROWS", 8)  # a tight budget, so drafts must be cut
    together = run(True)  # mixed_chunk stays at its default, true: row_exact runs chunks alone all the same
    assert together == reference
    batched = [feeds for feeds, row_exact in calls if len(feeds) >= 2]
    assert batched and all(row_exact for _feeds, row_exact in calls)
    assert max(sum(feeds) for feeds in batched) == 8  # blocks cut to fit the rows
    assert all(sum(feeds) <= 8 for feeds, _row_exact in calls)  # and no prompt chunk rode along


@needs_onednn
def test_under_row_exact_the_cache_keeps_and_reuses_whole_prefill_chunks_only(tiny):
    from ray_dspine.engines.embedded.model import LoadedModel

    loaded = LoadedModel(_bf16_packed(tiny), tiny.tokenizer, tiny.path, tiny.sha256, tiny.eos_token_ids, 512)
    base = "0123456789abcdefghijklmnopqrstuvwxyzABCD"  # 40 characters: one token each

    def run(prompts: list[str], reuse: bool):
        config = EmbeddedEngineConfig(
            row_exact=True, prefix_reuse=reuse, context_length_tokens=256, kv_budget_tokens=2048, prefix_block_tokens=8,
            prefill_chunk_tokens=16,  # chunks of 16 tokens, blocks of 8
        )

        async def main():
            engine = EmbeddedEngine(config, loader=lambda _c: loaded)
            await engine.start()
            out = []
            try:
                for i, text in enumerate(prompts):
                    request = GenerateRequest(request_id=f"r{i}", prompt=text, max_tokens=12)
                    chunks = [c async for c in engine.generate(request)]
                    out.append(("".join(c.text for c in chunks), chunks[-1].usage.cached_prompt_tokens))
                return out, engine._block_cache.cached_tokens
            finally:
                await engine.stop()

        return asyncio.run(main())

    prompts = [base, base + "EFG", base[:30] + "xyz"]
    warm, cached = run(prompts, reuse=True)
    # the first prompt (40 tokens) leaves its 2 whole chunks (32 tokens): not its partial chunk, nor its output
    # (blocks of 8 alone would have cached 48 of its 51 held tokens); the second (43) hits those 32 and adds
    # nothing (its whole chunks are the same two); the third (33) shares 30 tokens: 3 blocks match, cut to 1
    # chunk (16), and its own second chunk adds the one block that differs, [24, 32): 32 + 8 cached
    assert [c for _t, c in warm] == [0, 32, 16]
    assert cached == 40
    cold, _ = run(prompts, reuse=False)
    assert [t for t, _c in warm] == [t for t, _c in cold]


# -- the real model, bf16 ------------------------------------------------------------------------------

def _prompts() -> list[list[dict]]:
    """Prompts 0 (chat), 7 (code edit) and 8 (agent) of the bench's list. MEASURED on the machine of the
    figures: in bf16 without the rule, the speculative output of 0 and 7 (64 tokens, whole proposals)
    differs from the autoregressive one."""
    import json
    from importlib import resources

    prompts = json.loads(resources.files("ray_dspine.bench.prompts").joinpath("engine.json").read_text())["prompts"]
    return [prompts[i]["messages"] for i in (0, 7, 8)]


@pytest.fixture(scope="module")
def loaded_bf16():
    """The real model under row_exact; skipped on a CPU whose bf16 kernels mix rows, where the engine refuses to
    load it (the refusal: test_the_engine_refuses_to_load_where_rows_are_not_kept_apart and the next test)."""
    from ray_dspine.engines.embedded.model import RowExactUnavailable, load_model

    try:
        return load_model(EmbeddedEngineConfig(row_exact=True))
    except RowExactUnavailable as error:
        pytest.skip(f"this CPU's bf16 kernels do not keep rows apart: {error.problem}")


async def _texts(engine: EmbeddedEngine, together: bool) -> list[tuple[str, object]]:
    async def one(i, messages):
        request = GenerateRequest(
            request_id=f"r{i}", messages=[ChatMessage(**m) for m in messages], max_tokens=64, temperature=0.0
        )
        chunks = [c async for c in engine.generate(request)]
        return "".join(c.text for c in chunks), chunks[-1].usage

    await engine.start()
    try:
        if together:
            return list(await asyncio.gather(*(one(i, m) for i, m in enumerate(_prompts()))))
        return [await one(i, m) for i, m in enumerate(_prompts())]
    finally:
        await engine.stop()


@needs_onednn
def test_the_engine_refuses_to_load_where_rows_are_not_kept_apart(monkeypatch):
    import ray_dspine.engines.embedded.packed_weights as packed_weights
    from ray_dspine.engines.embedded.model import RowExactUnavailable, load_model

    seen = []

    def mixing(model, rows):
        seen.append(rows)
        return "model.layers.0.mlp.down_proj gives rows fed 17 at a time other bits than fed alone"

    monkeypatch.setattr(packed_weights, "rows_apart", mixing)
    with pytest.raises(RowExactUnavailable, match="fed 17 at a time .*; set row_exact: false"):
        load_model(EmbeddedEngineConfig(row_exact=True))
    assert seen == [ROW_EXACT_MAX_ROWS]


def test_the_real_model_loads_under_row_exact_exactly_where_its_layers_keep_rows_apart():
    """On this machine's CPU, whichever it is: bf16 loads, packed where oneDNN has bf16 kernels for the CPU and plain
    where it has not; the engine's row_exact verdict is the rows-apart check of the packed layers, or, with none,
    the reason none could be packed; and dtype auto follows it and the CPU's bf16 instructions (bf16 with row_exact,
    or fp32)."""
    from ray_dspine.engines.embedded.model import RowExactUnavailable, bf16_unsupported, load_model

    plain = load_model(EmbeddedEngineConfig(dtype="bf16"))  # packed where it can be, not checked
    packed = sum(isinstance(module, PackedLinear) for module in plain.model.modules())
    # 30 layers x (q k v o, gate up down) + the output projection
    assert packed == (211 if unpacked_reason() is None else 0)
    with torch.inference_mode():
        logits = plain.model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.dtype == torch.bfloat16 and bool(torch.isfinite(logits).all())
    problem = rows_apart(plain.model, ROW_EXACT_MAX_ROWS) if packed else f"no layer can be packed: {unpacked_reason()}"
    try:
        load_model(EmbeddedEngineConfig(row_exact=True))
        refused = None
    except RowExactUnavailable as error:
        refused = error.problem
    assert refused == problem
    auto = load_model(EmbeddedEngineConfig(dtype="auto"))
    takes_bf16 = problem is None and bf16_unsupported() is None  # model.py rule `dtype auto`
    assert (auto.dtype, auto.row_exact) == (("bf16", True) if takes_bf16 else ("fp32", False))


@needs_onednn
def test_bf16_row_exact_greedy_output_is_the_same_speculative_or_not_batched_or_not(loaded_bf16):
    def run(together: bool, **overrides):
        config = EmbeddedEngineConfig(row_exact=True, **overrides)
        return asyncio.run(_texts(EmbeddedEngine(config, loader=lambda _c: loaded_bf16), together))

    # the whole proposal every step (adaptive_draft off), so blocks of up to 32 rows are verified
    reference = run(False, speculative=False, max_batch_requests=1)
    alone = run(False, adaptive_draft=False, max_batch_requests=1)
    together = run(True, adaptive_draft=False)
    assert [t for t, _ in alone] == [t for t, _ in reference]
    assert [t for t, _ in together] == [t for t, _ in reference]
    assert alone[1][1].accept_length > 2  # the code edit verified long blocks
    assert max(u.accept_length for _, u in together) > 1.5


@needs_onednn
def test_bf16_row_exact_greedy_output_is_the_same_on_a_warm_cache_and_a_cold_one(loaded_bf16):
    """Prompts 0, 2 and 10 of the bench's list in load_prompts' order (a chat, an agent turn, a code edit).
    MEASURED on the machine of the figures: with the hit not cut to whole chunks, the answers to 0 and 10 on a
    warm cache differ from the cold ones (64 tokens; `python -m dspine_lab.engines.reuse_identity --dtype bf16
    --row-exact`)."""
    from ray_dspine.bench.engine_bench import load_prompts

    prompts = [p["messages"] for i, p in enumerate(load_prompts(12, "all")) if i in (0, 2, 10)]

    async def answers(reuse: bool, passes: int) -> list[tuple[str, int]]:
        engine = EmbeddedEngine(EmbeddedEngineConfig(row_exact=True, prefix_reuse=reuse), loader=lambda _c: loaded_bf16)
        await engine.start()
        out = []
        try:
            for round_ in range(passes):
                for i, messages in enumerate(prompts):
                    request = GenerateRequest(
                        request_id=f"p{round_}-{i}", messages=[ChatMessage(**m) for m in messages], max_tokens=64,
                        temperature=0.0,
                    )
                    chunks = [c async for c in engine.generate(request)]
                    out.append(("".join(c.text for c in chunks), chunks[-1].usage.cached_prompt_tokens))
        finally:
            await engine.stop()
        return out

    cold = asyncio.run(answers(False, 1))
    warm = asyncio.run(answers(True, 2))[len(prompts) :]
    assert [t for t, _c in warm] == [t for t, _c in cold]
    # the second pass found its prompt's whole chunks only: the agent turn's first 512 tokens, none of the others
    assert [c for _t, c in warm] == [0, 512, 0]
