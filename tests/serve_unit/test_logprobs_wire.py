"""Log-probabilities on the wire: one test per rule of ray_dspine/serve/logprobs_wire.py, answers built by
serve/responses.py, and SGLang 0.5.23's own serializers and response classes judging them."""

import asyncio
import json
from types import SimpleNamespace

import pytest

from ray_dspine.engines.module_stand_ins import install_module_stand_ins
from ray_dspine.engines.protocol import Chunk, GenerateRequest, TokenLogprob, TopLogprob, Usage
from ray_dspine.serve import responses
from ray_dspine.serve.logprobs_wire import CompletionLogprobs, chat_logprobs, lossless
from ray_dspine.serve.stream_batching import merge_chunks
from test_responses import Stream, Timer


def entry(token: str, raw: bytes, logprob: float, top=()) -> TokenLogprob:
    return TokenLogprob(token=token, bytes=list(raw), logprob=logprob,
                        top_logprobs=[TopLogprob(token=t, bytes=list(b), logprob=v) for t, b, v in top])  # fmt: skip


# "a 🐍!" in five tokens: U+1F40D (F0 9F 90 8D) split over three, each alone decoding to U+FFFD
SNAKE = [entry("a", b"a", -0.5, [("a", b"a", -0.5), ("b", b"b", -1.5)]), entry(" \ufffd", b" \xf0\x9f", -1.0),
         entry("\ufffd", b"\x90", -0.25), entry("\ufffd", b"\x8d", -0.125), entry("!", b"!", -2.0)]  # fmt: skip


def test_rule_chat_entries_as_they_are():
    assert chat_logprobs(SNAKE[:1]) == {"content": [{"token": "a", "bytes": [97], "logprob": -0.5, "top_logprobs": [
        {"token": "a", "bytes": [97], "logprob": -0.5}, {"token": "b", "bytes": [98], "logprob": -1.5}]}]}


def test_rule_lossless_pieces_of_a_character_as_latin1():
    assert [lossless(e) for e in SNAKE] == ["a", " \xf0\x9f", "\x90", "\x8d", "!"]
    # a U+FFFD that is a whole character (its bytes EF BF BD are valid UTF-8) stays as it is
    assert lossless(entry("\ufffd", "\ufffd".encode(), -1.0)) == "\ufffd"


def test_rule_completions_parallel_lists_and_text_offsets():
    wire = CompletionLogprobs().wire(SNAKE)
    assert wire == {
        "tokens": ["a", " \xf0\x9f", "\x90", "\x8d", "!"],
        "token_logprobs": [-0.5, -1.0, -0.25, -0.125, -2.0],
        "top_logprobs": [{"a": -0.5, "b": -1.5}, {}, {}, {}, {}],
        # "a 🐍!": a at 0, the space at 1, every piece of the snake at 2 (its character's offset), ! at 3
        "text_offset": [0, 1, 2, 2, 3],
    }


def test_rule_completions_no_alternatives_asked_an_empty_list():
    wire = CompletionLogprobs(alternatives=False).wire(SNAKE[1:])
    assert (wire["tokens"], wire["top_logprobs"]) == ([" \xf0\x9f", "\x90", "\x8d", "!"], [])


def test_rule_text_offset_goes_on_across_a_streams_events():
    choice = CompletionLogprobs()
    assert [choice.wire(SNAKE[:2])["text_offset"], choice.wire(SNAKE[2:])["text_offset"]] == [[0, 1], [2, 2, 3]]


ASKED = GenerateRequest(request_id="chatcmpl-1", prompt="x", max_tokens=8, logprobs=True, top_logprobs=2)
# the first step's text is held back (a possible stop string), the second sends it, the last is a trimmed EOS
HELD = [Chunk(text="", num_tokens=1, logprobs=SNAKE[:1]), Chunk(text="a 🐍", num_tokens=3, logprobs=SNAKE[1:4]),
        Chunk(text="!", num_tokens=1, logprobs=SNAKE[4:]),
        Chunk(finish_reason="stop", matched_stop=2, num_tokens=1, usage=Usage(completion_tokens=6),
              logprobs=[entry("<|im_end|>", b"<|im_end|>", -0.75)])]  # fmt: skip


def events(chunks, chat, request=ASKED):
    async def run():
        gen = responses.sse_events(Stream(chunks[1:]), chunks[0], request, "m", chat, False, False, Timer(), 1e18)
        return [e async for e in gen]

    return [json.loads(e[len("data: "):]) for e in asyncio.run(run()) if e != "data: [DONE]\n\n"]


def collect(chunks, chat, request=ASKED):
    return asyncio.run(responses.collect(Stream(chunks[1:]), chunks[0], request, "m", chat, Timer(), 1e18))


def test_a_stream_sends_held_back_tokens_scores_with_the_next_event():
    out = events(HELD, chat=True)
    scored = [[e["token"] for e in event["choices"][0]["logprobs"]["content"]] for event in out]
    assert scored == [["a", " \ufffd", "\ufffd", "\ufffd"], ["!"], ["<|im_end|>"]]  # 6 = completion_tokens
    offsets = [event["choices"][0]["logprobs"]["text_offset"] for event in events(HELD, chat=False)]
    assert offsets == [[0, 1, 2, 2], [3], [4]]


def test_answers_carry_every_tokens_score_and_none_unless_asked():
    chat = collect(HELD, chat=True)["choices"][0]["logprobs"]["content"]
    assert [e["logprob"] for e in chat] == [-0.5, -1.0, -0.25, -0.125, -2.0, -0.75]
    text = collect(HELD, chat=False)["choices"][0]["logprobs"]
    assert text["tokens"][-2:] == ["!", "<|im_end|>"] and text["text_offset"] == [0, 1, 2, 2, 3, 4]
    plain = ASKED.model_copy(update={"logprobs": False, "top_logprobs": 0})
    assert collect(HELD, chat=True, request=plain)["choices"][0]["logprobs"] is None
    assert all(event["choices"][0]["logprobs"] is None for event in events(HELD, chat=False, request=plain))


def test_sglangs_response_classes_read_our_logprobs():
    protocol = pytest.importorskip("sglang.srt.entrypoints.openai.protocol")
    chat = protocol.ChatCompletionResponse.model_validate(collect(HELD, chat=True)).choices[0].logprobs
    assert [e.bytes for e in chat.content][:2] == [[97], [32, 240, 159]]
    assert chat.content[0].top_logprobs[1].token == "b"
    text = protocol.CompletionResponse.model_validate(collect(HELD, chat=False)).choices[0].logprobs
    assert text.token_logprobs == [-0.5, -1.0, -0.25, -0.125, -2.0, -0.75]
    for event in events(HELD, chat=True):
        protocol.ChatCompletionStreamResponse.model_validate(event)
    for event in events(HELD, chat=False):
        protocol.CompletionStreamResponse.model_validate(event)


def test_stream_batching_joins_the_scores_in_order():
    merged, = merge_chunks(HELD[:3])
    assert [e.token for e in merged.logprobs] == ["a", " \ufffd", "\ufffd", "\ufffd", "!"]
    assert merge_chunks([Chunk(text="a", num_tokens=1), Chunk(text="b", num_tokens=1)])[0].logprobs is None


@pytest.fixture(scope="module")
def tokenizer():
    from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
    from ray_dspine.engines.embedded.model import load_model

    return load_model(EmbeddedEngineConfig(dtype="fp32")).tokenizer


def test_sglangs_own_serializers_spell_the_engines_tokens_as_we_do(tokenizer):
    """SGLang's tokenizer manager turns (logprob, id) into (logprob, id, text) triples, and its chat and completions
    layers into OpenAI's shapes; from the same ids and values, ours must give the same tokens, bytes and values."""
    pytest.importorskip("sglang.srt.entrypoints.openai.protocol")
    install_module_stand_ins()  # SGLang's serving modules import vision code at module level
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat
    from sglang.srt.entrypoints.openai.utils import to_openai_style_logprobs
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    from ray_dspine.engines.embedded.logprobs import TokenTexts

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    ids = tokenizer.encode("Hello 🐍 café!", add_special_tokens=False) + [eos]
    values = [-0.5 - i / 8 for i in range(len(ids))]
    tops = [[(ids[(i + 1) % len(ids)], values[i] - 1)] for i in range(len(ids))]
    ours = TokenTexts(tokenizer).wire([(i, v, top) for i, v, top in zip(ids, values, tops)])

    manager = SimpleNamespace(tokenizer=tokenizer)
    triples = TokenizerManager.detokenize_logprob_tokens(manager, values, ids, True)
    top_triples = [TokenizerManager.detokenize_logprob_tokens(manager, [v for _, v in top], [i for i, _ in top], True)
                   for top in tops]  # fmt: skip
    serving = SimpleNamespace(tokenizer_manager=manager)
    theirs = OpenAIServingChat._build_token_logprobs_from_raw(serving, triples, top_triples)
    assert chat_logprobs(ours)["content"] == [entry.model_dump() for entry in theirs]
    assert any("\ufffd" in entry.token for entry in ours)  # the control: pieces of a character are among them
    legacy = to_openai_style_logprobs(output_token_logprobs=triples, output_top_logprobs=top_triples,
                                      tokenizer=tokenizer)  # fmt: skip
    wire = CompletionLogprobs().wire(ours)
    assert (wire["tokens"], wire["token_logprobs"], wire["top_logprobs"]) == (
        legacy.tokens, legacy.token_logprobs, legacy.top_logprobs)
    assert set(legacy.text_offset) == {-1}  # SGLang's "not supported yet"; ours are the characters' offsets
    assert wire["text_offset"][:3] == [0, 5, 6]
    # completions `logprobs: 0`: SGLang's tokenizer manager sends no top lists, and its layer leaves them empty
    bare = to_openai_style_logprobs(output_token_logprobs=triples, output_top_logprobs=None, tokenizer=tokenizer)
    entries = TokenTexts(tokenizer).wire([(i, v, []) for i, v in zip(ids, values)])
    plain = CompletionLogprobs(alternatives=False).wire(entries)
    assert (plain["tokens"], plain["token_logprobs"], plain["top_logprobs"]) == (
        bare.tokens, bare.token_logprobs, bare.top_logprobs) and bare.top_logprobs == []
