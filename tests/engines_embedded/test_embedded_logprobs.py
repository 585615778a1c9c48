"""Log-probabilities of the embedded engine: one test per rule of engines/embedded/logprobs.py and sequence.py's
rule `logprobs`, by hand on small rows, then on the real SmolLM2-135M model (fp32)."""

import asyncio
import math

import pytest
import torch

from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
from ray_dspine.engines.embedded.engine import EmbeddedEngine
from ray_dspine.engines.embedded.logprobs import TokenTexts, entries
from ray_dspine.engines.embedded.model import load_model
from ray_dspine.engines.protocol import ChatMessage, GenerateRequest

LN2, LN4 = math.log(2), math.log(4)
CODE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"


def test_rule_values_greedy_and_tempered():
    # softmax([0, 0, ln 2]) = [1/4, 1/4, 1/2]
    rows = torch.tensor([[0.0, 0.0, LN2], [LN2, 0.0, 0.0]])
    found = entries(rows, 0.0, [2, 1], top=0)
    assert [(token, round(value, 6), top) for token, value, top in found] == [
        (2, round(-LN2, 6), []), (1, round(-LN4, 6), [])]
    # sampled at T = 2: log_softmax(z / 2), so [0, 0, 2 ln 2] scores as [0, 0, ln 2] did greedily
    (token, value, _), = entries(torch.tensor([[0.0, 0.0, 2 * LN2]]), 2.0, [0], top=0)
    assert (token, value) == (0, pytest.approx(-LN4))


def test_rule_which_one_entry_per_token_from_its_own_row():
    rows = torch.tensor([[0.0, LN2, 0.0], [0.0, 0.0, LN2], [LN2, 0.0, 0.0], [9.0, 9.0, 9.0]])
    found = entries(rows, 0.0, [1, 2, 0], top=0)  # 3 tokens: rows 0..2, the 4th row unused
    assert [token for token, _, _ in found] == [1, 2, 0]
    assert [value for _, value, _ in found] == pytest.approx([-LN2] * 3)


def test_rule_values_a_masked_token_is_clamped_to_float32s_least():
    rows = torch.tensor([[0.0, float("-inf"), 0.0]])
    (_, value, top), = entries(rows, 0.0, [1], top=3)
    least = torch.finfo(torch.float32).min
    assert value == least and top[-1] == (1, least)


def test_rule_top_likeliest_first_ties_to_the_smaller_id():
    rows = torch.tensor([[0.0, LN2, 0.0, LN2]])  # probabilities 1/6, 1/3, 1/6, 1/3
    (token, value, top), = entries(rows, 0.0, [0], top=3)
    assert token == 0 and value == pytest.approx(math.log(1 / 6))
    assert [i for i, _ in top] == [1, 3, 0]  # the emitted token ranks third here
    assert [v for _, v in top] == pytest.approx([math.log(1 / 3), math.log(1 / 3), math.log(1 / 6)])


def test_rule_top_is_the_first_n_of_a_stable_descending_sort_ties_at_the_cut_included():
    generator = torch.Generator().manual_seed(0)
    rows = torch.randint(0, 6, (40, 50), generator=generator).float()  # values 0..5 in 50 ids: ties everywhere
    for n in (1, 3, 7, 20):
        found = entries(rows, 0.0, [0] * 40, top=n)
        ranked, order = torch.sort(torch.log_softmax(rows, dim=-1), dim=-1, descending=True, stable=True)
        for i, (_, _, top) in enumerate(found):
            assert [token for token, _ in top] == order[i, :n].tolist(), (n, i)
            assert [value for _, value in top] == ranked[i, :n].tolist()


@pytest.fixture(scope="module")
def loaded():
    return load_model(EmbeddedEngineConfig(dtype="fp32"))


def test_rule_text_pieces_of_a_character_keep_their_bytes(loaded):
    texts = TokenTexts(loaded.tokenizer)
    assert texts.byte_level  # SmolLM2's tokenizer is GPT-2's byte-level BPE
    ids = loaded.tokenizer.encode(" 🐍 café", add_special_tokens=False)
    spelled = [texts.of(i) for i in ids]
    # U+1F40D is F0 9F 90 8D: its pieces decode alone to U+FFFD, their bytes are the character's
    assert b"".join(bytes(raw) for _, raw in spelled) == " 🐍 café".encode()
    assert any("\ufffd" in text for text, _ in spelled)
    assert spelled[-1] == (" café", list(" café".encode()))
    eos = loaded.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert texts.of(eos) == ("<|im_end|>", list(b"<|im_end|>"))  # an added token: the UTF-8 of its text


def _request(text, max_tokens=24, **fields) -> GenerateRequest:
    return GenerateRequest(request_id="r", messages=[ChatMessage(role="user", content=text)], max_tokens=max_tokens,
                           temperature=fields.pop("temperature", 0.0), logprobs=True, **fields)  # fmt: skip


def _decode(loaded, request, **config):
    async def main():
        eng = EmbeddedEngine(EmbeddedEngineConfig(dtype="fp32", **config), loader=lambda _c: loaded)
        await eng.start()
        chunks = [chunk async for chunk in eng.generate(request)]
        await eng.stop()
        return chunks

    chunks = asyncio.run(main())
    return chunks, [entry for chunk in chunks for entry in (chunk.logprobs or [])]


def _steps(loaded, request, speculative: bool):
    """The request decoded step by step alone (sequence.py `run_step`): its output ids and its steps' entries."""
    from ray_dspine.engines.embedded.prompt import render_prompt
    from ray_dspine.engines.embedded.sequence import run_step
    from ray_dspine.engines.embedded.sequence_setup import make_sequence

    config = EmbeddedEngineConfig(dtype="fp32", speculative=speculative, adaptive_draft=False)
    prompt = render_prompt(loaded.tokenizer, request)
    seq = make_sequence(config, loaded, request, prompt, drafter_enabled=speculative)
    found = []
    while seq.finished is None:
        found += run_step(seq, loaded.model, 512, speculative).logprobs or []
    return prompt, seq, found


def test_logprobs_are_the_models_own_speculative_or_not(loaded):
    request = _request("Rename add to plus and return the whole code:\n" + CODE, max_tokens=40, top_logprobs=2)
    prompt, seq, plain = _steps(loaded, request, speculative=False)
    _, spec_seq, spec = _steps(loaded, request, speculative=True)
    assert spec_seq.output_ids == seq.output_ids and spec_seq.verify_steps < len(seq.output_ids) / 1.5  # the control
    assert [token for token, _, _ in plain] == [token for token, _, _ in spec] == seq.output_ids
    assert [value for _, value, _ in spec] == pytest.approx([value for _, value, _ in plain], abs=1e-4)
    # the model's own forward over prompt + output: log_softmax at each output position
    with torch.inference_mode():
        logits = loaded.model(input_ids=torch.tensor([prompt + seq.output_ids])).logits[0].float()
    reference = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    assert [value for _, value, _ in plain] == pytest.approx(
        [reference[i, token].item() for i, token in enumerate(seq.output_ids)], abs=1e-4)
    for token, value, top in plain:  # greedy: the chosen token is the likeliest, the first of its alternatives
        assert len(top) == 2 and top[0] == (token, value) and top[1][1] <= value


def test_rule_values_sampled_tempered_before_the_filters_speculative_or_not(loaded):
    request = _request("Rename add to plus and return the whole code:\n" + CODE, max_tokens=24, temperature=0.7,
                       top_p=0.9, seed=5)  # fmt: skip
    for speculative in (False, True):
        prompt, seq, found = _steps(loaded, request, speculative=speculative)
        assert [token for token, _, _ in found] == seq.output_ids, speculative
        with torch.inference_mode():
            logits = loaded.model(input_ids=torch.tensor([prompt + seq.output_ids])).logits[0].float()
        # log_softmax(z / T) over the whole vocabulary: top_p = 0.9 cuts what may be drawn, not the values
        reference = torch.log_softmax(logits[len(prompt) - 1 : -1] / 0.7, dim=-1)
        assert [value for _, value, _ in found] == pytest.approx(
            [reference[i, token].item() for i, token in enumerate(seq.output_ids)], abs=1e-4), speculative


def test_the_engine_sends_one_entry_per_completion_token(loaded):
    request = _request("Rename add to plus and return the whole code:\n" + CODE, max_tokens=40, top_logprobs=2)
    chunks, found = _decode(loaded, request, speculative=True)
    usage = chunks[-1].usage
    assert len(found) == usage.completion_tokens
    assert max(chunk.num_tokens for chunk in chunks) > 1  # a verify step kept a draft: a chunk of several tokens
    for chunk in chunks:  # each chunk scores the tokens it carries
        assert len(chunk.logprobs or []) == chunk.num_tokens
    text = "".join(chunk.text for chunk in chunks)
    assert chunks[-1].finish_reason == "stop" and found[-1].token == "<|im_end|>"  # scored, though not shown
    assert "".join(entry.token for entry in found[:-1]) == text  # no piece of a character here: the texts add up
    assert all(entry.top_logprobs[0].token == entry.token for entry in found)
    assert all(entry.bytes == list(entry.token.encode()) for entry in found)


def test_rule_logprobs_cut_with_the_tokens_an_end_token_and_a_stop_string(loaded):
    request = _request("What is the capital of France?")
    chunks, found = _decode(loaded, request, speculative=False)
    text = "".join(c.text for c in chunks)
    assert chunks[-1].finish_reason == "stop" and found[-1].token == "<|im_end|>"  # the trimmed EOS is scored
    assert len(found) == chunks[-1].usage.completion_tokens and "".join(e.token for e in found[:-1]) == text
    # a stop string: the token that completes it is scored, the tokens after it in its step are not
    cut = text.split()[2]
    chunks, stopped = _decode(loaded, _request("What is the capital of France?", stop=[cut]), speculative=True)
    assert chunks[-1].matched_stop == cut and len(stopped) == chunks[-1].usage.completion_tokens < len(found)
    assert [e.token for e in stopped] == [e.token for e in found[: len(stopped)]]
    assert cut in "".join(e.token for e in stopped)


def test_no_logprobs_unless_asked(loaded):
    request = _request("What is the capital of France?", max_tokens=4).model_copy(update={"logprobs": False})
    chunks, found = _decode(loaded, request)
    assert found == [] and all(chunk.logprobs is None for chunk in chunks)
