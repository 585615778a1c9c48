"""The embedded engine's prompt for `continue_final_message` is the one SGLang 0.5.23's own chat serving builds.

SGLang's side: its ChatCompletionRequest parses the messages; when the request sets the flag, its
`OpenAIServingChat._handle_last_assistant_message` decides what is continued, the template renders the rest with
the generation prompt, and `_append_assistant_prefix_to_prompt_ids` appends the continued text (both methods are
SGLang's own, called with a stand-in `self` that holds the tokenizer and no reasoning parser). Ours: prompt.py's
`render_prompt`. Over the character tokenizer of tests/conftest.py, with a BOS that `encode` adds (id 94, "~"),
worked out by hand:

  continued      user "hi", assistant "Sure, the": "user: hi|assistant: " then "Sure, the" (its BOS dropped)
  last is user   user "hi", flag set: "user: hi|assistant: ", as without the flag
  flag off       user "hi", assistant "Sure, the": the assistant turn rendered, then a new one:
                 "user: hi|assistant: Sure, the|assistant: "
  no text        user "hi", assistant with a tool call and no content, flag set: rendered as without the flag (the
                 call flattened to JSON by prompt.py)
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ray_dspine.engines.embedded.prompt import message_text, render_prompt
from ray_dspine.engines.module_stand_ins import install_module_stand_ins
from ray_dspine.engines.protocol import ChatMessage, EngineError, GenerateRequest

BOS = 94


class Tokenizer:
    """tests/conftest.py's character tokenizer, with a BOS that `encode` adds unless told not to."""

    bos_token_id = BOS

    def encode(self, text, add_special_tokens=True):
        return ([BOS] if add_special_tokens else []) + [ord(c) - 32 for c in text if 32 <= ord(c) < 127]

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=False):
        text = "".join(f"{m['role']}: {m['content']}|" for m in messages)
        return text + ("assistant: " if add_generation_prompt else "")


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
CASES = {  # name -> (messages, flag, the prompt's text, worked out by hand)
    "continued": ([("user", "hi"), ("assistant", "Sure, the")], True, "user: hi|assistant: Sure, the"),
    "last is user": ([("user", "hi")], True, "user: hi|assistant: "),
    "flag off": ([("user", "hi"), ("assistant", "Sure, the")], False, "user: hi|assistant: Sure, the|assistant: "),
    "no text": ([("user", "hi"), ("assistant", None)], True,
                'user: hi|assistant: {"arguments": "{}", "name": "f"}|assistant: '),
}


def messages(pairs) -> list[dict]:
    return [{"role": role, "content": text, **({} if text is not None else {"tool_calls": [CALL]})}
            for role, text in pairs]  # fmt: skip


def ids(text: str) -> list[int]:
    return Tokenizer().encode(text, add_special_tokens=False)


def ours(pairs, flag: bool) -> list[int]:
    request = GenerateRequest(request_id="p", max_tokens=8, continue_final_message=flag,
                              messages=[ChatMessage.model_validate(m) for m in messages(pairs)])  # fmt: skip
    return render_prompt(Tokenizer(), request)


def sglangs(pairs, flag: bool) -> list[int]:
    install_module_stand_ins()  # serving_chat imports vision code at module level
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang.srt.entrypoints.openai.serving_chat import OpenAIServingChat

    tokenizer = Tokenizer()
    request = ChatCompletionRequest(model="m", messages=messages(pairs), continue_final_message=flag)
    dicts = [message.model_dump(exclude_none=True) for message in request.messages]
    prefix = None
    if request.continue_final_message:  # as its _process_messages does
        dicts, prefix = OpenAIServingChat._handle_last_assistant_message(None, dicts, request)
    # the template sees our flattened text (prompt.py's tool-call rule), so only the continuation is judged
    rendered = [{"role": d["role"], "content": message_text(ChatMessage.model_validate(d))} for d in dicts]
    prompt = tokenizer.encode(tokenizer.apply_chat_template(rendered, add_generation_prompt=True), False)
    if prefix:
        stand_in = SimpleNamespace(_reasoning_detector=None, tokenizer_manager=SimpleNamespace(tokenizer=tokenizer))
        prompt = OpenAIServingChat._append_assistant_prefix_to_prompt_ids(stand_in, prompt, prefix)
    return prompt


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_prompt_is_as_worked_out_by_hand(name):
    pairs, flag, text = CASES[name]
    assert ours(pairs, flag) == ids(text)


def test_an_assistant_message_alone_is_a_400_naming_messages():
    with pytest.raises(EngineError, match="send at least one message before it") as refused:
        ours([("assistant", "Sure")], True)
    assert (refused.value.status, refused.value.param) == (400, "messages")
    assert ours([("assistant", "Sure")], False) == ids("assistant: Sure|assistant: ")


@pytest.mark.parametrize("name", sorted(CASES))
def test_sglangs_own_chat_serving_builds_the_same_prompt(name):
    pytest.importorskip("sglang")
    pairs, flag, text = CASES[name]
    assert sglangs(pairs, flag) == ids(text)
