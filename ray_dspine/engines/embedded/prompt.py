"""Turn a request into prompt token ids with the model's own chat template.

Tool-call turns are flattened to text the template can render: an assistant message's `tool_calls`
are appended as JSON lines, a `tool` message keeps its role and content. Raw completions are
tokenized as given, without special tokens.
"""

from __future__ import annotations

import json

from ..protocol import GenerateRequest


def message_text(message) -> str:
    text = message.content or ""
    calls = (message.model_extra or {}).get("tool_calls")
    if calls:
        rendered = "\n".join(json.dumps(call.get("function", call), sort_keys=True) for call in calls)
        text = f"{text}\n{rendered}" if text else rendered
    return text


def render_prompt(tokenizer, request: GenerateRequest) -> list[int]:
    if request.messages is None:
        return tokenizer.encode(request.prompt or "", add_special_tokens=False)
    messages = [{"role": m.role, "content": message_text(m)} for m in request.messages]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer.encode(text, add_special_tokens=False)
