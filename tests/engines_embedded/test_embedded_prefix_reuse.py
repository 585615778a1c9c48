"""Prefix reuse in the engine, on a tiny random-weight Llama (fp32) with a character tokenizer."""

import asyncio

from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
from ray_dspine.engines.embedded.engine import EmbeddedEngine
from ray_dspine.engines.protocol import GenerateRequest

FIRST = "The quick brown fox jumps over the lazy d"  # 41 characters = 41 tokens
SECOND = FIRST + "og. And then it ran away!"  # 66 tokens, the first 41 shared


def engine(tiny, **overrides):
    config = dict(dtype="fp32", context_length_tokens=256, kv_budget_tokens=1024, prefix_block_tokens=8)
    config.update(overrides)
    return EmbeddedEngine(EmbeddedEngineConfig(**config), loader=lambda _c: tiny)


def req(text, request_id, max_tokens=12):
    return GenerateRequest(request_id=request_id, prompt=text, max_tokens=max_tokens)


async def run(eng, request):
    chunks = [c async for c in eng.generate(request)]
    return "".join(c.text for c in chunks), chunks[-1].usage


def replay(tiny, texts, **overrides):
    async def main():
        eng = engine(tiny, **overrides)
        await eng.start()
        out = [await run(eng, req(text, f"r{i}")) for i, text in enumerate(texts)]
        await asyncio.sleep(0.05)
        load = eng.load()
        await eng.stop()
        return out, load

    return asyncio.run(main())


def test_second_turn_prefills_only_what_no_cached_prefix_covers(tiny):
    (first, second), load = replay(tiny, [FIRST, SECOND], speculative=False)
    assert first[1].cached_prompt_tokens == 0
    # B = 8: FIRST's 41 tokens hold 5 full blocks (0..39); SECOND's block 5 (40..47) differs from
    # what FIRST's KV holds there (FIRST's own output), so the hit is 5 blocks = 40 tokens.
    assert second[1].cached_prompt_tokens == 40
    assert second[1].prompt_tokens == 66
    # every request ended: all cached blocks are evictable, and count as free KV
    assert load.evictable_kv_tokens > 0 and load.free_kv_tokens == load.total_kv_tokens
    assert load.cache_generation == 1 and load.num_running == 0


def test_the_first_chunk_names_the_prompt_and_its_cached_tokens(tiny):
    async def main():
        eng = engine(tiny, speculative=False)
        await eng.start()
        streams = [[c async for c in eng.generate(req(text, f"r{i}"))] for i, text in enumerate([FIRST, SECOND])]
        await eng.stop()
        return streams

    first, second = asyncio.run(main())
    # the counts of the test above, from the first chunk rather than the end; no later chunk repeats them
    assert (first[0].prompt_tokens, first[0].cached_prompt_tokens) == (41, 0)
    assert (second[0].prompt_tokens, second[0].cached_prompt_tokens) == (66, 40)
    assert all(c.prompt_tokens is None and c.cached_prompt_tokens is None for c in first[1:] + second[1:])


def test_identical_prompt_keeps_one_token_to_prefill(tiny):
    (_first, again), _load = replay(tiny, [FIRST, FIRST], speculative=False)
    assert again[1].cached_prompt_tokens == 40  # cap floor((41 - 1) / 8) = 5 blocks
    (_a, again32), _ = replay(tiny, [FIRST[:40], FIRST[:40]], speculative=False)
    assert again32[1].cached_prompt_tokens == 32  # 40 tokens: cap floor(39 / 8) = 4 blocks


def test_greedy_output_identical_with_and_without_reuse(tiny):
    for speculative in (False, True):
        with_reuse, _ = replay(tiny, [FIRST, SECOND, SECOND + " Again."], speculative=speculative)
        without, _ = replay(tiny, [FIRST, SECOND, SECOND + " Again."], speculative=speculative, prefix_reuse=False)
        assert [text for text, _ in with_reuse] == [text for text, _ in without]
        assert [u.cached_prompt_tokens for _, u in without] == [0, 0, 0]
        assert with_reuse[2][1].cached_prompt_tokens >= 64  # SECOND's 66 prompt tokens: 8 full blocks


def test_small_budget_evicts_lru_and_still_serves(tiny):
    # budget 96 tokens: each request reserves up to 66 + 12; older blocks must be evicted to admit
    texts = [FIRST, SECOND, "Completely different text here, nothing shared!", SECOND]
    out, load = replay(tiny, texts, speculative=False, kv_budget_tokens=96, context_length_tokens=80)
    assert all(usage.completion_tokens > 0 for _text, usage in out)
    assert load.free_kv_tokens == 96
