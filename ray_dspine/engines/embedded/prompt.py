"""Turn a request into prompt token ids with the model's own chat template.

Raw completions are tokenized as given, without special tokens.

Rule `tools` (a request whose tools are active, tool_parser.py rule `active`): a chat template that reads
`tools` (its source names them) is given the request's tools and the conversation's structured turns, as
SGLang 0.5.23's chat serving gives them: assistant `tool_calls` with their arguments as JSON objects,
`tool_call_id` and `name` on tool turns. A template that does not (the default model's) would hide the tools
from the model, so the tools block (TOOLS_HEADER, one JSON line a tool, the call format) is put in the system
message: after the first message's text when it is a system message, else as a new system message first.
With a named tool_choice, the tools given are that one only, as SGLang gives its template.
Rule `history` (templates that do not read tools, with or without active tools): an assistant turn's calls
are written after its text in the format tool_parser.py reads (`call_text`), so the model sees its own calls
as it is asked to write them; a `tool` turn keeps its role and its text.

Rule `continue` (SGLang 0.5.23's serving_chat: `_handle_last_assistant_message`, then
`_append_assistant_prefix_to_prompt_ids`): with `continue_final_message` and a last message from the
assistant with text content, that message is taken out, the rest is rendered with the generation prompt as
usual, and its text is tokenized on its own and appended (less a leading BOS), so the answer continues it;
the answer holds the continuation only. Without the flag, or when the last message is not the assistant's,
the prompt is rendered as usual. An assistant message alone leaves nothing to render: a 400 naming `messages`
(SGLang answers the chat template's error with a 400 too).
"""

from __future__ import annotations

import json

from ..protocol import ChatMessage, EngineError, GenerateRequest
from .tool_parser import CALL_END, CALL_START, call_arguments, call_text, offered_tools, tools_active

TOOLS_HEADER = "# Tools\n\nYou can call functions to help answer. The functions are listed in <tools></tools> tags:"
CALL_FORMAT = ("To call a function, answer with a JSON object holding its name and arguments inside "
               "<tool_call></tool_call> tags:")  # fmt: skip


def tools_block(tools: list[dict]) -> str:
    """The tools block of rule `tools` for a template that does not read tools."""
    lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    example = '{"name": <function name>, "arguments": <arguments as a JSON object>}'
    return f"{TOOLS_HEADER}\n<tools>\n{lines}\n</tools>\n\n{CALL_FORMAT}\n{CALL_START}{example}{CALL_END}"


def message_text(message: ChatMessage) -> str:
    """Rule `history`: the turn's text, then its calls."""
    calls = (message.model_extra or {}).get("tool_calls") or []
    parts = [message.content] if message.content else []
    parts += [call_text(call["function"]["name"], call["function"].get("arguments") or "") for call in calls]
    return "\n".join(parts)


def reads_tools(tokenizer) -> bool:
    return "tools" in str(getattr(tokenizer, "chat_template", None) or "")


def _structured(message: ChatMessage) -> dict:
    """A turn as a tools-reading template takes it (rule `tools`)."""
    turn = {"role": message.role, "content": message.content, **(message.model_extra or {})}
    if turn.get("tool_calls"):
        turn["tool_calls"] = [
            {**call, "function": {**call["function"], "arguments": call_arguments(call["function"].get("arguments"))}}
            for call in turn["tool_calls"]
        ]
    return turn


def _template_input(tokenizer, request: GenerateRequest, messages: list[ChatMessage]) -> tuple[list[dict], dict]:
    """The turns and keyword arguments `apply_chat_template` gets (rules `tools` and `history`)."""
    active = tools_active(request)
    if reads_tools(tokenizer):
        return [_structured(m) for m in messages], ({"tools": offered_tools(request)} if active else {})
    turns = [{"role": m.role, "content": message_text(m)} for m in messages]
    if active:
        block = tools_block(offered_tools(request))
        if turns and turns[0]["role"] == "system":
            text = turns[0]["content"]
            turns[0] = {"role": "system", "content": f"{text}\n\n{block}" if text else block}
        else:
            turns.insert(0, {"role": "system", "content": block})
    return turns, {}


def render_prompt(tokenizer, request: GenerateRequest) -> list[int]:
    if request.messages is None:
        return tokenizer.encode(request.prompt or "", add_special_tokens=False)
    messages, prefix = request.messages, None
    if request.continue_final_message and messages[-1].role == "assistant" and messages[-1].content is not None:
        messages, prefix = messages[:-1], messages[-1].content
        if not messages:
            raise EngineError("continue_final_message continues the last assistant message after the conversation "
                              "before it; send at least one message before it", status=400, param="messages",
                              code="invalid_value")  # fmt: skip
    turns, extra = _template_input(tokenizer, request, messages)
    text = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False, **extra)
    ids = tokenizer.encode(text, add_special_tokens=False)
    if prefix is None:
        return ids
    appended = tokenizer.encode(prefix)
    bos = getattr(tokenizer, "bos_token_id", None)
    return ids + (appended[1:] if appended and appended[0] == bos else appended)
