"""Batched verify steps (batch.py, engine.py round rule) on a tiny random-weight Llama in fp32."""

import asyncio

import pytest
import torch
from transformers import DynamicCache

from ray_dspine.engines.embedded.batch import forward_packed, install_segment_attention, packed_layout, segment_mask
from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
from ray_dspine.engines.embedded.engine import EmbeddedEngine, round_groups
from ray_dspine.engines.embedded.kv_cache import SlabCache
from ray_dspine.engines.protocol import GenerateRequest

# Different lengths (tokens = characters): 61, 15 and 39 tokens; the first and last repeat themselves,
# so the n-gram drafter proposes and verify blocks of different lengths share a step.
TEXTS = [
    "The quick brown fox jumps over the lazy dog. The quick brown",
    "abcabcabcabcabc",
    "Hello there, general Kenobi! Hello there",
]


def test_packed_layout_positions_and_rows_by_hand():
    # Request a holds 2 cached tokens and feeds 1; request b holds 1 and feeds 2 (module docstring):
    # a continues at position 2 in row 0; b continues at 1, then 2, in rows 1 and 2.
    positions, spans = packed_layout([2, 1], [1, 2])
    assert positions == [2, 1, 2]
    assert spans == [(0, 1), (1, 2)]
    with pytest.raises(ValueError):
        packed_layout([1], [1, 1])


def test_segment_mask_by_hand():
    # b of the worked example: 1 cached key, 2 new ones. Its first new token sees b0 and itself; the
    # second sees b0, the first new token and itself.
    assert torch.equal(segment_mask(1, 2), torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    assert segment_mask(2, 1) is None  # one new token sees every key: no mask
    assert torch.equal(segment_mask(0, 3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))


def test_segment_attention_outside_a_packed_step_is_sdpa():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2)
    model, ids = LlamaForCausalLM(config).eval(), torch.tensor([[3, 4, 5, 6, 7, 8]])
    with torch.inference_mode():
        before = model(input_ids=ids).logits
        install_segment_attention(model)
        install_segment_attention(model)  # once is enough; again changes nothing
        after = model(input_ids=ids).logits
    assert model.config._attn_implementation == "dspine_segments"
    assert torch.equal(before, after)  # the same kernel and mask: bit for bit
    eager = LlamaForCausalLM(config).eval()
    eager.set_attn_implementation("eager")
    with pytest.raises(ValueError, match="sdpa"):
        install_segment_attention(eager)


def _prefilled(model, ids, cache_class=SlabCache):
    cache = cache_class()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return cache


@pytest.mark.parametrize("cache_class", [SlabCache, DynamicCache])
def test_packed_forward_matches_each_request_alone(tiny, cache_class):
    model = tiny.model
    prompts, feeds = [[1, 2, 3, 4, 5], [7, 8], [9, 10, 11]], [[20], [21, 22, 23], [24, 25]]
    caches = [_prefilled(model, p, cache_class) for p in prompts]
    with torch.inference_mode():
        logits = forward_packed(model, caches, feeds)
        alone = []
        for prompt, feed in zip(prompts, feeds):
            cache = _prefilled(model, prompt, cache_class)
            out = model(input_ids=torch.tensor([feed]), past_key_values=cache, use_cache=True)
            alone.append((out.logits[0], cache))
    for rows, (ref_rows, _cache) in zip(logits, alone):
        assert rows.shape == ref_rows.shape
        assert torch.allclose(rows, ref_rows, atol=1e-5)  # same math, reduction order may differ in the last bits
        assert torch.equal(rows.argmax(-1), ref_rows.argmax(-1))
    # every request's cache grew by all it fed (5 + 1, 2 + 3, 3 + 2), holding the keys it computed alone
    assert [c.get_seq_length() for c in caches] == [6, 5, 5]
    for cache, (_rows, ref_cache) in zip(caches, alone):
        assert torch.allclose(cache.layers[1].keys, ref_cache.layers[1].keys, atol=1e-5)
    # Request 1 keeps its last token and its first draft: cropping its third new token leaves 2 + 2.
    caches[1].crop(-1)
    assert caches[1].get_seq_length() == 4
    assert torch.allclose(caches[1].layers[0].keys, alone[1][1].layers[0].keys[:, :, :4], atol=1e-5)


def test_a_packed_forward_of_one_request_gives_the_model_s_own_logits_bit_for_bit(tiny):
    # One request: the same projections over the same rows; attention reads the 2 key/value heads in place
    # where the model's own forward copies them out to the 4 query heads. Same values, same order.
    model = tiny.model
    for feed in ([20], [21, 22, 23, 24, 25]):
        cache, reference = _prefilled(model, [1, 2, 3, 4, 5, 6, 7]), _prefilled(model, [1, 2, 3, 4, 5, 6, 7])
        with torch.inference_mode():
            (packed,) = forward_packed(model, [cache], [feed])
            alone = model(input_ids=torch.tensor([feed]), past_key_values=reference, use_cache=True).logits[0]
        assert torch.equal(packed, alone)
        assert torch.equal(cache.layers[1].keys, reference.layers[1].keys)


def _engine(tiny, **overrides):
    config = dict(dtype="fp32", context_length_tokens=256, kv_budget_tokens=2048, prefix_block_tokens=8)
    config.update(overrides)
    return EmbeddedEngine(EmbeddedEngineConfig(**config), loader=lambda _c: tiny)


async def _run(eng, text, request_id, max_tokens):
    request = GenerateRequest(request_id=request_id, prompt=text, max_tokens=max_tokens)
    chunks = [c async for c in eng.generate(request)]
    return "".join(c.text for c in chunks), chunks[-1].usage


def _solo(tiny, texts, max_tokens, **overrides):
    async def main():
        eng = _engine(tiny, max_batch_requests=1, **overrides)
        await eng.start()
        out = [await _run(eng, t, f"s{i}", m) for i, (t, m) in enumerate(zip(texts, max_tokens))]
        await eng.stop()
        return out

    return asyncio.run(main())


def _together(tiny, texts, max_tokens, **overrides):
    async def main():
        eng = _engine(tiny, **overrides)
        await eng.start()
        out = await asyncio.gather(*(_run(eng, t, f"b{i}", m) for i, (t, m) in enumerate(zip(texts, max_tokens))))
        await asyncio.sleep(0.05)
        load = eng.load()
        await eng.stop()
        return out, eng, load

    return asyncio.run(main())


@pytest.mark.parametrize("speculative", [True, False])
def test_batched_greedy_output_equals_each_request_alone(tiny, speculative):
    # the whole proposal every step (adaptive_draft off): this checks verify inside a batch, not
    # draft_policy's timing-dependent choice of k, which may pick no draft on a busy machine
    max_tokens, options = [30, 30, 30], dict(speculative=speculative, adaptive_draft=False)
    alone = _solo(tiny, TEXTS, max_tokens, **options)
    batched, eng, load = _together(tiny, TEXTS, max_tokens, max_batch_requests=4, **options)
    # Measured on this tiny fp32 model: no greedy mismatch (the packed forward's logits differ from the
    # alone ones by ~1e-7, far below any argmax margin here).
    assert [text for text, _ in batched] == [text for text, _ in alone]
    assert [u.completion_tokens for _, u in batched] == max_tokens
    # the three requests really shared forwards: some batched step of 2 or 3 requests was timed
    assert any(any(s is not None for s in costs.seconds) for n, costs in eng._batch_costs.items() if n >= 2)
    assert load.num_running == 0 and load.free_kv_tokens == load.total_kv_tokens
    if speculative:
        assert max(u.accept_length for _, u in batched) > 1.0  # drafts were accepted inside batches


def test_unbatched_switch_never_batches_and_is_exact(tiny):
    alone = _solo(tiny, TEXTS, [24, 24, 24])
    together, eng, _load = _together(tiny, TEXTS, [24, 24, 24], max_batch_requests=1)
    assert [t for t, _ in together] == [t for t, _ in alone]
    assert eng._batch_costs == {}  # max_batch_requests = 1: every step ran alone


def test_a_verify_step_alone_is_a_packed_forward_of_one_request(tiny, monkeypatch):
    # sequence.py: a verify block alone goes through forward_packed, so transformers' sdpa (which copies the 2
    # key/value heads out to the 4 query heads for a block of more than one token) sees only the prompt's
    # prefill chunk, one call per layer (2 layers) with the whole 15-token prompt as queries, and the
    # one-token steps that had no draft.
    import ray_dspine.engines.embedded.batch as batch

    install_segment_attention(tiny.model)
    queries, real = [], batch._sdpa

    def spy(module, query, *args, **kwargs):
        queries.append(query.shape[2])
        return real(module, query, *args, **kwargs)

    monkeypatch.setattr(batch, "_sdpa", spy)
    [(text, usage)] = _solo(tiny, [TEXTS[1]], [12], adaptive_draft=False)
    assert queries[:2] == [15, 15] and set(queries[2:]) <= {1}
    assert usage.accept_length > 1.0  # verify blocks of several tokens ran, none of them through sdpa
    monkeypatch.undo()
    [(reference, _usage)] = _solo(tiny, [TEXTS[1]], [12], speculative=False)
    assert text == reference


def test_request_finishing_mid_batch_leaves_the_others_correct(tiny):
    # 3, 25 and 11 tokens: the first leaves the batch after its first verify steps, the third midway.
    max_tokens = [3, 25, 11]
    alone = _solo(tiny, TEXTS, max_tokens)
    batched, _eng, load = _together(tiny, TEXTS, max_tokens, max_batch_requests=4)
    assert [t for t, _ in batched] == [t for t, _ in alone]
    assert [u.completion_tokens for _, u in batched] == max_tokens
    assert load.free_kv_tokens == load.total_kv_tokens


def test_cancelled_request_mid_batch_leaves_the_others_correct(tiny):
    alone = _solo(tiny, TEXTS[1:], [30, 30])

    async def main():
        eng = _engine(tiny, max_batch_requests=4)
        await eng.start()
        doomed = eng.generate(GenerateRequest(request_id="gone", prompt=TEXTS[0], max_tokens=150))
        others = asyncio.gather(*(_run(eng, t, f"k{i}", 30) for i, t in enumerate(TEXTS[1:])))
        await doomed.__anext__()  # it decodes, batched with the others
        await doomed.__anext__()
        await doomed.aclose()  # the client goes away mid-batch
        out = await others
        await asyncio.sleep(0.05)
        load = eng.load()
        await eng.stop()
        return out, load

    out, load = asyncio.run(main())
    assert [t for t, _ in out] == [t for t, _ in alone]
    assert load.num_running == 0 and load.free_kv_tokens == load.total_kv_tokens


def test_prefix_reuse_with_batching(tiny):
    first = "The quick brown fox jumps over the lazy d"  # 41 tokens: 5 full blocks of 8 once it ran
    followers = [first + "og. And then it ran away!", first + "uck. It swam off.", first + "ormouse, asleep."]

    def main(reuse):
        async def go():
            eng = _engine(tiny, prefix_reuse=reuse, max_batch_requests=4)
            await eng.start()
            await _run(eng, first, "warm", 12)
            out = await asyncio.gather(*(_run(eng, t, f"f{i}", 16) for i, t in enumerate(followers)))
            await eng.stop()
            return out

        return asyncio.run(go())

    with_reuse, without = main(True), main(False)
    alone = _solo(tiny, followers, [16, 16, 16], prefix_reuse=False)
    assert [t for t, _ in with_reuse] == [t for t, _ in without] == [t for t, _ in alone]
    # each follower shares the first prompt's 5 full blocks (40 tokens); the 6th block differs
    assert [u.cached_prompt_tokens for _, u in with_reuse] == [40, 40, 40]
    assert [u.cached_prompt_tokens for _, u in without] == [0, 0, 0]


def test_prefill_chunk_packs_beside_a_verify_block(tiny):
    model = tiny.model
    decoding = _prefilled(model, [1, 2, 3, 4])
    fresh = SlabCache()  # a request before its first chunk: L = 0
    with torch.inference_mode():
        # rows: the verify block keeps both of its rows, the 5-token chunk only its last
        logits = forward_packed(model, [decoding, fresh], [[5, 6], [30, 31, 32, 33, 34]], [2, 1])
        alone = model(input_ids=torch.tensor([[30, 31, 32, 33, 34]]), use_cache=False).logits[0]
    assert [rows.shape[0] for rows in logits] == [2, 1]
    assert torch.allclose(logits[1][0], alone[-1], atol=1e-5)
    assert fresh.get_seq_length() == 5 and decoding.get_seq_length() == 6  # 4 + the verify block's 2


def test_round_groups_by_hand():
    # running order: chunk a, block b, block c, chunk d, block e (P = still prefilling)
    names, prefilling = ["a", "b", "c", "d", "e"], [True, False, False, True, False]
    # mixed, 3 per forward: each forward takes the next chunk first, then blocks in order until full
    assert round_groups(names, prefilling, 3, mixed=True) == [["a", "b", "c"], ["d", "e"]]
    # not mixed: chunks alone first, then the blocks in groups of 3
    assert round_groups(names, prefilling, 3, mixed=False) == [["a"], ["d"], ["b", "c", "e"]]
    # two chunks never share a forward, even with room
    assert round_groups(["a", "d"], [True, True], 4, mixed=True) == [["a"], ["d"]]
    # only blocks: consecutive groups of up to 2
    assert round_groups(["b", "c", "e"], [False] * 3, 2, mixed=True) == [["b", "c"], ["e"]]
    # max_batch_requests 1: every request alone, in running order (the exact path)
    assert round_groups(names, prefilling, 1, mixed=True) == [[n] for n in names]


def _spy_forwards(monkeypatch):
    """Record (feed lengths, logit rows) of every packed forward the engine runs."""
    import ray_dspine.engines.embedded.engine as engine_module

    calls = []

    def spy(model, caches, feeds, logit_rows=None, row_exact=False):
        calls.append(([len(f) for f in feeds], list(logit_rows) if logit_rows is not None else None))
        return forward_packed(model, caches, feeds, logit_rows, row_exact)

    monkeypatch.setattr(engine_module, "forward_packed", spy)
    return calls


def _staggered(tiny, mixed: bool):
    """Request 0 decodes 40 tokens; requests 1 and 2 arrive once it streams, so their prompts' chunks run
    while it decodes."""

    async def main():
        eng = _engine(tiny, max_batch_requests=4, mixed_chunk=mixed)
        await eng.start()
        first = eng.generate(GenerateRequest(request_id="m0", prompt=TEXTS[0], max_tokens=40))
        head = await first.__anext__()
        rest = asyncio.gather(*(_run(eng, t, f"m{i + 1}", 20) for i, t in enumerate(TEXTS[1:])))
        text = head.text + "".join([c.text async for c in first])
        out = [text] + [t for t, _ in await rest]
        await eng.stop()
        return out

    return asyncio.run(main())


@pytest.mark.parametrize("mixed", [True, False])
def test_prefill_chunk_rides_with_verify_blocks_and_output_is_unchanged(tiny, monkeypatch, mixed):
    alone = _solo(tiny, TEXTS, [40, 20, 20])
    calls = _spy_forwards(monkeypatch)
    assert _staggered(tiny, mixed) == [t for t, _ in alone]
    # a chunk in a packed forward: a feed of several tokens of which one logits row is kept
    chunk_forwards = [c for c in calls if any(q > 1 and r == 1 for q, r in zip(*c))]
    assert bool(chunk_forwards) is mixed
    # never two chunks in one forward
    assert all(sum(q > 1 and r == 1 for q, r in zip(*c)) <= 1 for c in calls)


def test_a_stop_pattern_over_its_search_budget_ends_its_request_with_a_400_alone_or_batched(tiny):
    # logit_bias makes every token "a" (id 65 = ord("a") - 32): (a|aa)+\d then backtracks through every way of
    # splitting the a's, which grows as the Fibonacci numbers; 60 a's took the whole 100 ms budget here (MEASURED)
    runaway = GenerateRequest(request_id="slow", prompt="xyz", max_tokens=120, temperature=0.0, ignore_eos=True,
                              logit_bias={"65": 100.0}, stop_regex=[r"(a|aa)+\d"])  # fmt: skip

    async def main(max_batch_requests):
        eng = _engine(tiny, max_batch_requests=max_batch_requests)
        await eng.start()
        slow, normal = await asyncio.gather(
            _chunks(eng, runaway), _chunks(eng, GenerateRequest(request_id="ok", prompt="abc", max_tokens=40)),
        )
        after = await _chunks(eng, GenerateRequest(request_id="after", prompt="abc", max_tokens=8))
        await eng.stop()
        return slow, normal, after

    for max_batch_requests in (1, 4):
        slow, normal, after = asyncio.run(main(max_batch_requests))
        last = slow[-1]
        assert (last.finish_reason, last.error_status, last.error_param) == ("error", 400, "stop_regex")
        assert last.error.startswith(r"stop_regex `(a|aa)+\d` took over 100 ms to search the output")
        assert set("".join(c.text for c in slow)) <= {"a"} and sum(c.num_tokens for c in slow) < 120
        assert normal[-1].error is None and normal[-1].usage.completion_tokens == 40
        assert after[-1].error is None and after[-1].usage.completion_tokens == 8  # the engine serves on


async def _chunks(eng, request):
    return [chunk async for chunk in eng.generate(request)]
