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
                 call written in tool_parser.py's format by prompt.py rule `history`; the character tokenizer drops
                 newlines)

Rule `tools` with a template that reads tools: SGLang's chat serving hands the template its messages (tool-call
arguments parsed by its own `normalize_assistant_tool_call_arguments`) and `tools=[tool.model_dump() ...]`; ours
hands it prompt.py's turns. Both go through the same Jinja template (transformers' renderer, TOOLS_TEMPLATE
below) and must give the same text. With the default template, which does not read tools, the tools block is in
the system message, worked out by hand.
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
                'user: hi|assistant: <tool_call>{"name": "f", "arguments": {}}</tool_call>|assistant: '),
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


TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
BLOCK = ("# ToolsYou can call functions to help answer. The functions are listed in <tools></tools> tags:<tools>"
         '{"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": '
         '{"type": "object", "properties": {"city": {"type": "string"}}}}}</tools>To call a function, answer with a '
         "JSON object holding its name and arguments inside <tool_call></tool_call> tags:<tool_call>"
         '{"name": <function name>, "arguments": <arguments as a JSON object>}</tool_call>')  # newlines dropped


def tools_request(system: str | None = None, choice: str | dict | None = None, tools=(TOOL,)) -> GenerateRequest:
    turns = ([ChatMessage(role="system", content=system)] if system is not None else []) + [
        ChatMessage(role="user", content="hi")]
    return GenerateRequest(request_id="p", max_tokens=8, messages=turns, tools=list(tools), tool_choice=choice)


def test_rule_tools_block_goes_in_the_system_message_when_the_template_does_not_read_tools():
    assert render_prompt(Tokenizer(), tools_request()) == ids(f"system: {BLOCK}|user: hi|assistant: ")
    brief = render_prompt(Tokenizer(), tools_request("Be brief."))
    assert brief == ids(f"system: Be brief.{BLOCK}|user: hi|assistant: ")
    assert render_prompt(Tokenizer(), tools_request("")) == ids(f"system: {BLOCK}|user: hi|assistant: ")
    assert render_prompt(Tokenizer(), tools_request(choice="none")) == ids("user: hi|assistant: ")
    # a named tool_choice shows that tool only, as SGLang's chat serving gives its template
    other = {"type": "function", "function": {"name": "now"}}
    named = {"type": "function", "function": {"name": "get_weather"}}
    shown = render_prompt(Tokenizer(), tools_request(choice=named, tools=(other, TOOL)))
    assert shown == ids(f"system: {BLOCK}|user: hi|assistant: ")


TOOLS_TEMPLATE = (
    "{% if tools %}[tools:{% for t in tools %}{{ t.function.name }}={{ t.function.parameters | tojson }};{% endfor %}]"
    "{% endif %}{% for m in messages %}<{{ m.role }}>{% if m.content %}{{ m.content }}{% endif %}"
    "{% for c in m.tool_calls or [] %}(call {{ c.id }} {{ c.function.name }} {{ c.function.arguments | tojson }}"
    "{% if c.function.arguments is mapping %} object{% endif %}){% endfor %}"
    "{% if m.tool_call_id %}(for {{ m.tool_call_id }}){% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "content": "18 C", "tool_call_id": "c1"},
    {"role": "user", "content": "And Tokyo?"},
]


@pytest.fixture(scope="module")
def tools_tokenizer():
    """A real transformers tokenizer whose chat template reads tools."""
    from transformers import PreTrainedTokenizerFast
    from tokenizers import Tokenizer as Fast, models, pre_tokenizers

    fast = Fast(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    fast.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=fast, unk_token="[UNK]")
    tokenizer.chat_template = TOOLS_TEMPLATE
    return tokenizer


def test_rule_tools_a_template_that_reads_tools_gets_what_sglang_gives_it(tools_tokenizer):
    pytest.importorskip("sglang")
    install_module_stand_ins()
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang.srt.entrypoints.openai.serving_chat import normalize_assistant_tool_call_arguments

    from ray_dspine.engines.embedded.prompt import _template_input

    parsed = ChatCompletionRequest(model="m", messages=CONVERSATION, tools=[TOOL])
    theirs = [message.model_dump() for message in parsed.messages]
    for message in theirs:
        normalize_assistant_tool_call_arguments(message)
    sglang_text = tools_tokenizer.apply_chat_template(
        theirs, tools=[tool.model_dump() for tool in parsed.tools], add_generation_prompt=True, tokenize=False)
    request = GenerateRequest(request_id="p", max_tokens=8, tools=[TOOL],
                              messages=[ChatMessage.model_validate(m) for m in CONVERSATION])
    turns, extra = _template_input(tools_tokenizer, request, request.messages)
    text = tools_tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False, **extra)
    assert text == sglang_text == (
        '[tools:get_weather={"type": "object", "properties": {"city": {"type": "string"}}};]<system>Be brief.'
        '<user>Weather in Paris?<assistant>(call c1 get_weather {"city": "Paris"} object)<tool>18 C(for c1)'
        "<user>And Tokyo?<assistant>"
    )
