"""The embedded engine with the real SmolLM2-135M model (loaded once for the module, fp32)."""

import asyncio

import pytest
import torch

from ray_dspine.engines.embedded.config import DEFAULT_MODEL_SHA256, EmbeddedEngineConfig
from ray_dspine.engines.embedded.engine import EmbeddedEngine
from ray_dspine.engines.embedded.model import ModelFileError, converted_folder, load_model, resolve_model_file
from ray_dspine.engines.protocol import ChatMessage, EngineError, GenerateRequest

CODE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
PROMPTS = [
    "What is the capital of France?",
    "Rename add to plus and return the whole code:\n" + CODE,
    "Repeat exactly: alpha beta gamma delta, alpha beta gamma delta.",
]


@pytest.fixture(scope="module")
def loaded():
    return load_model(EmbeddedEngineConfig(dtype="fp32"))


def engine(loaded, **overrides) -> EmbeddedEngine:
    config = EmbeddedEngineConfig(dtype="fp32", **overrides)
    return EmbeddedEngine(config, loader=lambda _c: loaded)


def request(text, max_tokens=48, request_id="r", **kw) -> GenerateRequest:
    return GenerateRequest(
        request_id=request_id, messages=[ChatMessage(role="user", content=text)], max_tokens=max_tokens,
        temperature=kw.pop("temperature", 0.0), **kw,
    )


async def run(eng: EmbeddedEngine, req: GenerateRequest):
    chunks = [chunk async for chunk in eng.generate(req)]
    return "".join(c.text for c in chunks), chunks[-1]


def test_greedy_output_identical_with_and_without_speculation(loaded):
    async def main():
        # the whole proposal every step: this checks the drafter and the verify rule, not draft_policy's
        # timing-dependent choice of k (its rules are tested with fake costs in test_embedded_draft_policy)
        spec, ar = engine(loaded, speculative=True, adaptive_draft=False), engine(loaded, speculative=False)
        await spec.start()
        await ar.start()
        results = []
        for i, text in enumerate(PROMPTS):
            results.append((await run(spec, request(text, request_id=f"s{i}")), await run(ar, request(text, request_id=f"a{i}"))))
        await spec.stop()
        await ar.stop()
        return results

    results = asyncio.run(main())
    for (spec_text, spec_last), (ar_text, ar_last) in results:
        assert spec_text == ar_text
        assert ar_last.usage.accept_length == 1.0
        assert ar_last.usage.path == "autoregressive" and spec_last.usage.path == "speculative"
        # histogram and counters agree: sum over k of (k+1) * hist[k] = completion tokens
        usage = spec_last.usage
        assert sum((k + 1) * n for k, n in enumerate(usage.accept_histogram)) == usage.completion_tokens
        assert sum(usage.accept_histogram) == usage.verify_steps
    # the code edit repeats its input: speculation must accept more than one token per step there
    assert results[1][0][1].usage.accept_length > 1.5


def test_max_tokens_is_honoured_exactly(loaded):
    async def main():
        eng = engine(loaded)
        await eng.start()
        out = await run(eng, request(PROMPTS[2], max_tokens=5))
        await eng.stop()
        return out

    _text, last = asyncio.run(main())
    assert last.usage.completion_tokens == 5 and last.finish_reason == "length"


def test_context_limits_refused_with_field_named(loaded):
    async def main():
        eng = engine(loaded, context_length_tokens=64, kv_budget_tokens=96)  # 64 + the 32-token draft block
        await eng.start()
        with pytest.raises(EngineError) as too_many:
            await run(eng, request("hi", max_tokens=60))
        with pytest.raises(EngineError) as too_long:
            await run(eng, request("word " * 100, max_tokens=1))
        clamped = await run(eng, request("hi", max_tokens=60, clamp_max_tokens=True))
        await eng.stop()
        return too_many.value, too_long.value, clamped

    too_many, too_long, (_text, last) = asyncio.run(main())
    assert too_many.status == 400 and too_many.param == "max_tokens"
    assert too_long.status == 400 and too_long.param == "messages"
    assert last.usage.prompt_tokens + last.usage.completion_tokens <= 64


def test_queue_beyond_slots_and_cancel_frees_budget(loaded):
    async def main():
        # autoregressive, so the first request surely still runs 0.2 s later (a long draft may copy it to its end)
        eng = engine(loaded, max_running_requests=1, max_queued_requests=1, speculative=False)
        await eng.start()
        first = eng.generate(request(PROMPTS[0], max_tokens=200, request_id="one"))
        await first.__anext__()  # running, holding the only slot
        second = eng.generate(request(PROMPTS[0], max_tokens=4, request_id="two"))
        second_task = asyncio.ensure_future(second.__anext__())
        await asyncio.sleep(0.2)
        busy = eng.load()
        with pytest.raises(EngineError) as overloaded:
            await eng.generate(request(PROMPTS[0], request_id="three")).__anext__()
        await first.aclose()  # a client that goes away frees its slot
        await second_task
        async for _ in second:
            pass
        await asyncio.sleep(0.1)
        idle = eng.load()
        await eng.stop()
        return busy, overloaded.value, idle

    busy, overloaded, idle = asyncio.run(main())
    assert busy.num_running == 1 and busy.num_queued == 1 and busy.free_state_slots == 0
    assert overloaded.status == 429
    assert idle.num_running == 0 and idle.free_kv_tokens == idle.total_kv_tokens


def test_sampling_is_reproducible_with_a_seed(loaded):
    async def main():
        eng = engine(loaded)
        await eng.start()
        a = await run(eng, request(PROMPTS[0], temperature=0.9, seed=7, request_id="x"))
        b = await run(eng, request(PROMPTS[0], temperature=0.9, seed=7, request_id="y"))
        await eng.stop()
        return a[0], b[0]

    a, b = asyncio.run(main())
    assert a == b and a


def test_wrong_model_file_is_refused(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"not a model")
    with pytest.raises(ModelFileError, match="sha256"):
        resolve_model_file(EmbeddedEngineConfig(model_path=str(bad)))


def test_greedy_multi_turn_identical_with_and_without_prefix_reuse(loaded):
    """Turn 2 repeats turn 1 and its answer: with reuse it prefills only the new part, same output."""

    def turn2(answer):
        return GenerateRequest(
            request_id="t2", max_tokens=48, temperature=0.0,
            messages=[
                ChatMessage(role="user", content=PROMPTS[1]),
                ChatMessage(role="assistant", content=answer),
                ChatMessage(role="user", content="Now rename sub to minus as well."),
            ],
        )

    async def main(reuse):
        eng = engine(loaded, prefix_reuse=reuse)
        await eng.start()
        first = await run(eng, request(PROMPTS[1], request_id="t1"))
        second = await run(eng, turn2(first[0]))
        await eng.stop()
        return first, second

    (first_on, second_on), (first_off, second_off) = asyncio.run(main(True)), asyncio.run(main(False))
    assert first_on[0] == first_off[0] and second_on[0] == second_off[0]
    assert second_off[1].usage.cached_prompt_tokens == 0
    # turn 1's prompt blocks at least (B = 16) are reused
    assert second_on[1].usage.cached_prompt_tokens >= (first_on[1].usage.prompt_tokens // 16) * 16


def greedy_run(loaded, text, max_tokens=24, speculative=False, **fields):
    """A greedy request decoded step by step alone: its finished Sequence and its text."""
    from ray_dspine.engines.embedded.prompt import render_prompt
    from ray_dspine.engines.embedded.sequence import run_step
    from ray_dspine.engines.embedded.sequence_setup import make_sequence

    config = EmbeddedEngineConfig(dtype="fp32", speculative=speculative, adaptive_draft=False)
    req = request(text, max_tokens=max_tokens, **fields)
    seq = make_sequence(config, loaded, req, render_prompt(loaded.tokenizer, req), drafter_enabled=speculative)
    text_out = ""
    while seq.finished is None:
        text_out += run_step(seq, loaded.model, 512, speculative).text
    return seq, text_out


def greedy_ids(loaded, text, max_tokens=24, speculative=False, **fields):
    """Its output token ids, finish reason and text."""
    seq, text_out = greedy_run(loaded, text, max_tokens, speculative, **fields)
    return seq.output_ids, seq.finished, text_out


def test_end_tokens_eos_ends_the_request_unless_ignore_eos(loaded):
    seq, _ = greedy_run(loaded, PROMPTS[0])
    ids = seq.output_ids
    assert seq.finished == "stop" and ids[-1] in loaded.eos_token_ids and len(ids) < 24  # the control: EOS ends it
    assert seq.matched_stop == ids[-1]  # SGLang's matched_stop: the end token's id
    seq, _ = greedy_run(loaded, PROMPTS[0], ignore_eos=True)
    assert (seq.finished, len(seq.output_ids), seq.matched_stop) == ("length", 24, None)


def test_end_tokens_min_tokens_masks_eos_until_reached(loaded):
    plain, _, plain_text = greedy_ids(loaded, PROMPTS[0])
    n = len(plain)  # the EOS is the n-th token
    assert plain[-1] in loaded.eos_token_ids and n + 4 < 24
    for speculative in (False, True):
        ids, finished, text = greedy_ids(loaded, PROMPTS[0], min_tokens=n + 4, speculative=speculative)
        # the same greedy tokens up to the EOS, which is masked at position n - 1 and below n + 3
        assert ids[: n - 1] == plain[: n - 1] and ids[n - 1] not in loaded.eos_token_ids
        assert len(ids) >= n + 4 and not set(ids[: n + 3]) & loaded.eos_token_ids
        assert text.startswith(plain_text), speculative


def test_end_tokens_a_stop_token_id_ends_the_request_and_is_not_shown(loaded):
    plain, _, _ = greedy_ids(loaded, PROMPTS[0])
    # the first token of the answer that did not come before it: the request ends on it
    at = next(i for i in range(2, len(plain)) if plain[i] not in plain[:i] and plain[i] not in loaded.eos_token_ids)
    seq, text = greedy_run(loaded, PROMPTS[0], stop_token_ids=[plain[at]])
    assert (seq.finished, seq.output_ids, seq.matched_stop) == ("stop", plain[: at + 1], plain[at])
    assert text == loaded.tokenizer.decode(plain[:at])
    ids, finished, _ = greedy_ids(loaded, PROMPTS[0], stop_token_ids=[plain[at]], ignore_eos=True)
    assert finished == "length" and len(ids) == 24  # ignore_eos: no token ends it, as in SGLang


def test_a_stop_pattern_ends_the_answer_at_the_token_that_completes_it_speculative_or_not(loaded):
    import re

    plain, _, plain_text = greedy_ids(loaded, PROMPTS[1], max_tokens=40)
    pattern = r"return a [+-] b"  # the code edit repeats its input; speculation accepts long blocks there
    at = next(n for n in range(1, len(plain) + 1) if re.search(pattern, loaded.tokenizer.decode(plain[:n])))
    expected = loaded.tokenizer.decode(plain[:at], skip_special_tokens=True)
    assert re.search(pattern, expected) and at < len(plain) - 4  # the control: the answer goes on after it
    for speculative in (False, True):
        seq, text = greedy_run(loaded, PROMPTS[1], max_tokens=40, speculative=speculative, stop_regex=[pattern])
        assert (seq.output_ids, seq.finished, text, seq.matched_stop) == (plain[:at], "stop", expected, pattern)
        # a stop string kept with no_stop_trim ends in the same place, its text included
        seq, text = greedy_run(loaded, PROMPTS[1], max_tokens=40, speculative=speculative,
                               stop=["return a + b"], no_stop_trim=True)  # fmt: skip
        assert text == plain_text[: plain_text.index("return a + b") + len("return a + b")], speculative
        assert seq.matched_stop == "return a + b"


def test_special_tokens_are_text_with_skip_special_tokens_false(loaded):
    _, finished, plain = greedy_ids(loaded, PROMPTS[0])
    assert finished == "stop"  # the control: EOS ends it
    _, _, kept = greedy_ids(loaded, PROMPTS[0], no_stop_trim=True)
    assert kept == plain  # the EOS is kept, but it has no text while special tokens are skipped
    _, _, shown = greedy_ids(loaded, PROMPTS[0], no_stop_trim=True, skip_special_tokens=False)
    assert shown == plain + "<|im_end|>"


def test_continue_final_message_continues_the_assistants_text(loaded):
    from ray_dspine.engines.embedded.prompt import render_prompt
    from ray_dspine.engines.embedded.sequence import run_step
    from ray_dspine.engines.embedded.sequence_setup import make_sequence

    _, _, plain = greedy_ids(loaded, PROMPTS[1], max_tokens=32)
    begun = plain[: plain.index("return") + len("return")]  # its own greedy answer, up to a whole token
    messages = [ChatMessage(role="user", content=PROMPTS[1]), ChatMessage(role="assistant", content=begun)]
    req = GenerateRequest(request_id="c", max_tokens=12, temperature=0.0, messages=messages,
                          continue_final_message=True)  # fmt: skip
    prompt = render_prompt(loaded.tokenizer, req)
    assert loaded.tokenizer.decode(prompt).endswith("<|im_start|>assistant\n" + begun)
    config = EmbeddedEngineConfig(dtype="fp32", speculative=False)
    seq = make_sequence(config, loaded, req, prompt, drafter_enabled=False)
    answer = ""
    while seq.finished is None:
        answer += run_step(seq, loaded.model, 512, False).text
    # the answer is the continuation alone, and greedy decoding goes on as it did after those tokens
    assert answer and plain.startswith(begun + answer)
    new_turn = render_prompt(loaded.tokenizer, req.model_copy(update={"continue_final_message": False}))
    assert loaded.tokenizer.decode(new_turn).endswith(begun + "<|im_end|>\n<|im_start|>assistant\n")


def test_sampling_fields_left_out_take_openais_defaults(loaded):
    from ray_dspine.engines.embedded.sequence_setup import make_sequence

    config = EmbeddedEngineConfig(dtype="fp32")
    req = request("hi", temperature=None, top_p=None, top_k=-1)
    seq = make_sequence(config, loaded, req, [1, 2, 3], drafter_enabled=False)
    assert (seq.temperature, seq.top_p, seq.top_k, seq.min_p) == (1.0, 1.0, 0, 0.0)
    seq = make_sequence(config, loaded, request("hi", top_k=20, min_p=0.1, min_tokens=99, max_tokens=8), [1],
                        drafter_enabled=False)  # fmt: skip
    assert (seq.top_k, seq.min_p, seq.min_tokens) == (20, 0.1, 8)  # min_tokens clamped to max_tokens, as SGLang


def test_penalties_choose_the_same_tokens_speculative_or_not(loaded):
    # the code edit repeats its prompt, so it drafts long blocks (how each verify row counts the drafts before
    # it, by hand: test_embedded_speculative.py, test_rule_penalties_count_the_output_and_the_drafts_before_each_row)
    plain, _, _ = greedy_ids(loaded, PROMPTS[1], max_tokens=32)
    for fields in ({"frequency_penalty": 2.0}, {"presence_penalty": 2.0}, {"repetition_penalty": 1.3}):
        ar, _, ar_text = greedy_ids(loaded, PROMPTS[1], max_tokens=32, **fields)
        spec, _, spec_text = greedy_ids(loaded, PROMPTS[1], max_tokens=32, speculative=True, **fields)
        assert ar != plain, fields  # the penalty changed the answer
        assert (spec, spec_text) == (ar, ar_text), fields


def test_logit_bias_steers_and_a_token_outside_the_vocabulary_is_refused(loaded):
    plain, _, _ = greedy_ids(loaded, PROMPTS[0])
    banned = plain[5]  # a token of the greedy answer
    ids, _, _ = greedy_ids(loaded, PROMPTS[0], logit_bias={str(banned): -100.0})
    assert banned not in ids and ids[:5] == plain[:5]
    vocab = loaded.model.config.vocab_size
    with pytest.raises(EngineError, match=f"token ids run from 0 to {vocab - 1}") as refused:
        greedy_ids(loaded, PROMPTS[0], logit_bias={str(vocab): 1.0})
    assert (refused.value.status, refused.value.param) == (400, "logit_bias")


def test_converted_cache_loads_the_bits_the_gguf_converts_to(tmp_path, caplog):
    """Rule `converted cache` (model.py): a folder that does not load is replaced by a fresh conversion, and the
    next load reads that folder and gives the same tensors and tokenizer."""
    import logging

    config = EmbeddedEngineConfig(dtype="fp32", converted_cache_dir=str(tmp_path))
    folder = converted_folder(config, resolve_model_file(config)[1])
    assert folder.parent == tmp_path and folder.name.startswith(DEFAULT_MODEL_SHA256 + "-fp32-transformers")
    folder.mkdir()  # an empty folder: does not load
    with caplog.at_level(logging.INFO, logger="ray_dspine.engines.embedded.model"):
        converted = load_model(config)
        assert f"converted cache {folder} does not load" in caplog.text
        assert "converting it from GGUF" in caplog.text and (folder / "model.safetensors").is_file()
        caplog.clear()
        cached = load_model(config)
        assert f"as converted in {folder}" in caplog.text and "converting it from GGUF" not in caplog.text
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no staging folder left behind
    ours, theirs = converted.model.state_dict(), cached.model.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert (cached.eos_token_ids, cached.context_length_tokens) == (converted.eos_token_ids, 8192)
    texts = ["def f(x):\n    return x + 1", "Ünïcödé — 漢字 🙂", "<|im_start|>user\nhi<|im_end|>", "   spaces\t\n"]
    for text in texts:
        assert cached.tokenizer.encode(text) == converted.tokenizer.encode(text)
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    render = lambda t: t.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)  # noqa: E731
    assert render(cached.tokenizer) == render(converted.tokenizer)
    assert render(converted.tokenizer).endswith("<|im_start|>assistant\n")
