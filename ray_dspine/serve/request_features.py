"""Which OpenAI request features a pool serves; a request asking for one its pool does not serve is refused.

A field asks for something only through its value: what SDKs send by default (false, 0, null, an
empty map, `response_format: {"type": "text"}`) always passes, so clients that fill in every field
keep working. Nothing is dropped silently: a feature is either carried to the engine or refused. The
sampling controls (temperature, top_p, top_k, min_p, the frequency, presence and repetition penalties,
logit_bias, min_tokens, ignore_eos, stop_token_ids), the stop controls (stop, stop_regex, no_stop_trim),
skip_special_tokens and chat's continue_final_message are carried to every pool.

Rules, checked in this order; the first that applies refuses with 400, param = the field, code
`unsupported_parameter` unless named otherwise:
  logprobs            chat: `top_logprobs` above 0 without `logprobs: true` is refused (code invalid_value), as
                      OpenAI answers. Asked for (chat: `logprobs` true; completions: `logprobs` set): embedded and
                      sglang pools only (a simulated pool has no model to score tokens).
  echo/best_of/suffix completions: `echo` true, `best_of` > 1, `suffix` non-empty. Refused on every pool.
  chat fields         completions: `continue_final_message` true is refused (a chat field).
  response_format     completions: refused (a chat field). Chat: "json_object", "json_schema" and
                      "structural_tag" on embedded and sglang pools (constrained decoding: SGLang's grammar
                      backend, the embedded engine's grammar.py, both xgrammar).
  min_tokens          above the max tokens asked for: refused on every pool (code invalid_value), as SGLang's
                      SamplingParams.verify refuses it.
  grammar             `regex` or `ebnf` non-empty: embedded and sglang pools; more than one of `regex`, `ebnf`
                      and a `response_format` other than "text": refused (code invalid_value), as SGLang allows one.
                      A json_schema needs its `schema` (a JSON object, or a string holding one, as SGLang
                      takes it; code invalid_value). Whether a pattern, grammar or schema compiles is the
                      engine's to say (xgrammar on both; a 400 naming the field): the ingress does not load it.
  sglang fields       SGLang's request fields this server does not carry (SGLANG_FIELDS_REFUSED) with a value
                      other than SGLang's default: refused on every pool. SGLANG_FIELDS_IGNORED are SGLang's
                      fields that do not change an answer here, each with the reason; SGLang's other fields are
                      the schema's own (openai_schema.py) and are carried or refused above.
  tools               non-empty: embedded and sglang pools (a tool-call parser turns calls into deltas: SGLang's
                      --tool-call-parser, the embedded engine's tool_parser.py); a simulated pool refuses them.
  tool_choice         must be "none", "auto", "required" or {"type": "function", "function": {"name": N}}
                      (code invalid_value); "required" or a named function needs `tools`, and N must name
                      one of them (code invalid_value), as OpenAI answers. Either forces a call, which takes
                      constrained decoding: embedded and sglang pools (grammar.py rule `forced`), and not
                      beside `response_format`, `regex` or `ebnf` (code invalid_value), as SGLang refuses.
Complexity: O(number of tools).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .openai_schema import ChatCompletionRequest, CompletionRequest

# Engine kinds whose pools constrain decoding to a grammar (response_format, regex, ebnf, forced tool calls).
GRAMMAR_ENGINES = frozenset({"embedded", "sglang"})
# Engine kinds whose pools read tool calls out of the model's answers.
TOOL_ENGINES = frozenset({"embedded", "sglang"})
# Engine kinds whose pools return log-probabilities.
LOGPROB_ENGINES = frozenset({"embedded", "sglang"})

# SGLang 0.5.23's request fields (ChatCompletionRequest, CompletionRequest) that no pool here carries, each with
# SGLang's default: the value a client may send and still pass (rule `sglang fields`).
SGLANG_FIELDS_REFUSED = {
    "separate_reasoning": True, "stream_reasoning": True, "json_schema": None, "lora_path": None,
    "session_id": None, "session_params": None, "custom_logit_processor": None, "custom_params": None,
    "watermark": None, "cache_salt": None, "input_ids": None, "thinking": None, "task": None,
    "return_hidden_states": False, "return_routed_experts": False, "return_token_ids": False,
    "return_prompt_token_ids": False, "return_meta_info": False, "return_input_ids_in_sglext": False,
    "return_output_ids_in_sglext": False, "return_sampling_mask": False, "sampling_logprobs_mode": None,
    "return_flat_raw_output_top_logprobs": False, "images_config": None, "video_config": None,
    "mm_processor_kwargs": None, "max_dynamic_patch": None, "min_dynamic_patch": None,
    "use_audio_in_video": False,
}  # fmt: skip
_REFUSED_HINTS = {
    "session_id": "SGLang's stateful sessions are not served; the x-session-id header keeps a conversation on its "
                  "replica",
    "json_schema": 'send `response_format: {"type": "json_schema", ...}` to /v1/chat/completions',
    "cache_salt": "every request here shares the prefix cache of its replica",
    "lora_path": "the pools serve their base model only",
}  # fmt: skip
SGLANG_FIELDS_IGNORED = {
    "rid": "the ingress names each request itself (the answer's `id`)",
    "return_spec_tokens_details": "usage always carries verify_steps, accept_length and accept_histogram",
    "return_cached_tokens_details": "usage always carries prompt_tokens_details.cached_tokens",
    "priority": "the router orders requests; an answer does not change with it",
    "extra_key": "a label for SGLang's own request classification",
    "custom_labels": "labels for SGLang's own metrics",
    "bootstrap_host": "prefill/decode placement inside one SGLang deployment; the router places requests",
    "bootstrap_port": "prefill/decode placement inside one SGLang deployment; the router places requests",
    "bootstrap_room": "prefill/decode placement inside one SGLang deployment; the router places requests",
    "routed_dp_rank": "data-parallel placement inside one SGLang server; the router places requests",
    "disagg_prefill_dp_rank": "data-parallel placement inside one SGLang server; the router places requests",
    "data_parallel_rank": "data-parallel placement inside one SGLang server; the router places requests",
    "routed_experts_start_len": "read only with return_routed_experts, which is refused",
    "return_flat_raw_top_logprobs_b64": "read only with return_flat_raw_output_top_logprobs, which is refused",
}  # fmt: skip


@dataclass(frozen=True)
class Refusal:
    param: str
    message: str
    code: str = "unsupported_parameter"


def refusal(parsed: ChatCompletionRequest | CompletionRequest, pool: str, engine_kind: str) -> Refusal | None:
    """The first rule above that `parsed` breaks on a pool of `engine_kind`, or None."""
    chat = isinstance(parsed, ChatCompletionRequest)
    grammar = engine_kind in GRAMMAR_ENGINES
    where = f"pool {pool!r} ({engine_kind} engine)"
    found = _logprobs(parsed, chat, where, engine_kind in LOGPROB_ENGINES) or _completion_only(parsed, chat)
    if found is not None:
        return found
    if not chat and (parsed.model_extra or {}).get("continue_final_message", False) is not False:
        return Refusal("continue_final_message", "`continue_final_message` is a chat field: send the conversation, "
                       "its last message the assistant's to continue, to /v1/chat/completions")  # fmt: skip
    if not chat and parsed.response_format is not None:
        return Refusal("response_format", "`response_format` is a chat field: send the request to /v1/chat/completions")
    kind = parsed.response_format.type if chat and parsed.response_format is not None else "text"
    if kind != "text" and not grammar:
        return Refusal("response_format", f"`response_format` {kind!r} is not served by {where}: it has no "
                       "constrained decoding; an embedded or sglang pool serves it")  # fmt: skip
    for check in (_min_tokens, _grammar, _sglang_fields):
        found = check(parsed, chat, where, grammar)
        if found is not None:
            return found
    if chat:
        return _tools(parsed, where, engine_kind in TOOL_ENGINES, grammar)
    return None


def _min_tokens(parsed, chat: bool, where: str, grammar: bool) -> Refusal | None:
    most = (parsed.max_completion_tokens if chat else None) or parsed.max_tokens
    if most is not None and parsed.min_tokens > most:
        return Refusal("min_tokens", f"min_tokens is {parsed.min_tokens}, more than the {most} tokens asked for at "
                       "most; lower it", code="invalid_value")  # fmt: skip
    return None


def _grammar(parsed, chat: bool, where: str, grammar: bool) -> Refusal | None:
    asked = [name for name in ("regex", "ebnf") if getattr(parsed, name)]
    if chat and parsed.response_format is not None and parsed.response_format.type != "text":
        asked.append("response_format")
    if len(asked) > 1:
        return Refusal(asked[1], f"only one of {', '.join(asked)} may constrain a request; send one",
                       code="invalid_value")  # fmt: skip
    if asked and asked[0] != "response_format" and not grammar:
        return Refusal(asked[0], f"`{asked[0]}` is not served by {where}: it has no constrained decoding; an "
                       "embedded or sglang pool serves it")  # fmt: skip
    if asked == ["response_format"] and parsed.response_format.type == "json_schema":
        if not isinstance(parsed.response_format.json_schema.get("schema"), (dict, str)):
            return Refusal("response_format", "response_format.json_schema needs a `schema`: the JSON schema (an "
                           "object) the answer must follow", code="invalid_value")  # fmt: skip
    return None


def _sglang_fields(parsed, chat: bool, where: str, grammar: bool) -> Refusal | None:
    extra = parsed.model_extra or {}
    for name, default in SGLANG_FIELDS_REFUSED.items():
        if name in extra and extra[name] != default:
            hint = _REFUSED_HINTS.get(name, f"send {json.dumps(default)} or leave it out")
            return Refusal(name, f"`{name}` (an SGLang field) is not served by this server; {hint}")
    return None


def _logprobs(parsed, chat: bool, where: str, served: bool) -> Refusal | None:
    if chat and (parsed.top_logprobs or 0) > 0 and parsed.logprobs is not True:
        return Refusal("top_logprobs", "top_logprobs is only allowed with `logprobs: true`; set logprobs to true",
                       code="invalid_value")  # fmt: skip
    asked = parsed.logprobs is True if chat else parsed.logprobs is not None
    if asked and not served:
        return Refusal("logprobs", f"log-probabilities are not served by {where}: it has no model to score tokens; "
                       "an embedded or sglang pool serves them")  # fmt: skip
    return None


def _completion_only(parsed, chat: bool) -> Refusal | None:
    if chat:
        return None
    if parsed.echo:
        return Refusal("echo", "`echo` is not served; the answer holds the completion only")
    if (parsed.best_of or 1) > 1:
        return Refusal("best_of", "`best_of` above 1 is not served; one completion is generated per request")
    if parsed.suffix:
        return Refusal("suffix", "`suffix` (insertion) is not served; send the text before the gap as the prompt")
    return None


def _tools(parsed: ChatCompletionRequest, where: str, served: bool, grammar: bool) -> Refusal | None:
    if parsed.tools and not served:
        return Refusal(
            "tools",
            f"`tools` is not supported by {where}: it has no model to call them; send the conversation "
            "without `tools` (tool results as `tool` messages are fine), or use an embedded or sglang pool",
        )
    choice = parsed.tool_choice
    if choice is None or choice in ("none", "auto"):
        return None
    named = _named_function(choice)
    if choice != "required" and named is None:
        return Refusal(
            "tool_choice",
            'tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
            code="invalid_value",
        )
    if not parsed.tools:
        return Refusal("tool_choice", "tool_choice asks for a tool call but the request has no `tools`", code="invalid_value")
    names = {tool.function.name for tool in parsed.tools}
    if named is not None and named not in names:
        return Refusal(
            "tool_choice", f"tool_choice names {named!r}, which is not among the request's tools", code="invalid_value"
        )
    if not grammar:
        return Refusal("tool_choice", f"tool_choice {json.dumps(choice)} is not served by {where}: forcing a call "
                       'takes constrained decoding; send "auto" (the model decides) or use an embedded or sglang '
                       "pool")  # fmt: skip
    other = [name for name in ("regex", "ebnf") if getattr(parsed, name)]
    if parsed.response_format is not None and parsed.response_format.type != "text":
        other.append("response_format")
    if other:
        return Refusal("tool_choice", f"a forced call and `{other[0]}` cannot both hold the answer; send one",
                       code="invalid_value")  # fmt: skip
    return None


def _named_function(choice) -> str | None:
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if isinstance(name, str) and name:
            return name
    return None
