"""Turn a request into prompt token ids with the model's own chat template.

Tool-call turns are flattened to text the template can render: an assistant message's `tool_calls`
are appended as JSON lines, a `tool` message keeps its role and content. Raw completions are
tokenized as given, without special tokens.

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

from ..protocol import EngineError, GenerateRequest


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
    messages, prefix = request.messages, None
    if request.continue_final_message and messages[-1].role == "assistant" and messages[-1].content is not None:
        messages, prefix = messages[:-1], messages[-1].content
        if not messages:
            raise EngineError("continue_final_message continues the last assistant message after the conversation "
                              "before it; send at least one message before it", status=400, param="messages",
                              code="invalid_value")  # fmt: skip
    rendered = [{"role": m.role, "content": message_text(m)} for m in messages]
    text = tokenizer.apply_chat_template(rendered, add_generation_prompt=True, tokenize=False)
    ids = tokenizer.encode(text, add_special_tokens=False)
    if prefix is None:
        return ids
    appended = tokenizer.encode(prefix)
    bos = getattr(tokenizer, "bos_token_id", None)
    return ids + (appended[1:] if appended and appended[0] == bos else appended)
