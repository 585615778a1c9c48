"""WordTokenizerDouble and the model config double: what SGLang would load from the checkpoint, which the tests lack.

The tests' model folders hold pinned placeholder weights and no tokenizer or config.json, so the server
double builds these instead of `get_tokenizer(model_path)` and `ModelConfig.from_server_args`.

Rules:
  tokenizer  transformers' own PythonBackend (slow-tokenizer machinery: added-token splitting, encode,
             decode, `apply_chat_template` with Jinja); only the word split is the double's: after the
             added tokens are split off, each run of whitespace joins the word that follows it
             (`\\s*\\S+`), and whitespace with no word after it is one token. So "fix the failing test"
             is 4 tokens and "\\n" between two added tokens is 1. Ids are handed out from 1000 in order of
             first sight (lossless: decode(encode(text)) == text), within a fixed vocab_size of 65536.
  specials   eos `<|im_end|>`, pad `<|endoftext|>`, `<|im_start|>` special (dropped by skip_special_tokens);
             `<think>`, `</think>`, `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>`
             added but not special, as in Qwen3's tokenizer, so the reasoning and tool-call parsers see them.
  template   a Qwen3-style ChatML template (CHAT_TEMPLATE): an optional system turn carrying the tools as one
             JSON object per line inside `<tools>`, user / assistant / tool turns (assistant tool calls in
             the qwen3_coder XML form, tool results as `<tool_response>` user turns), and a generation
             prompt `<|im_start|>assistant\\n` followed by `<think>\\n` (thinking open) or, with
             `enable_thinking=false`, `<think>\\n\\n</think>\\n\\n` (thinking closed).
  model      build_model_config: the ModelConfig attributes SGLang's tokenizer manager and OpenAI layer read,
             for a text-only, generative Qwen3-Next hybrid (`Qwen3NextForCausalLM`, hidden size 5120) without a
             joint or pointer head; context length = --context-length, else 32768; no
             generation_config.json, so no default sampling params.
"""

from __future__ import annotations

import re
import threading
from types import SimpleNamespace

from transformers.tokenization_python import PythonBackend

VOCAB_SIZE = 65536
FIRST_WORD_ID = 1000
THINK_START, THINK_END = "<think>", "</think>"
ADDED_TOKENS = (THINK_START, THINK_END, "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")

CHAT_TEMPLATE = (
    "{%- set ns = namespace(system='') -%}"
    "{%- if messages and messages[0].role == 'system' -%}{%- set ns.system = messages[0].content -%}{%- endif -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if ns.system -%}{{- ns.system + '\\n\\n' -}}{%- endif -%}"
    "{{- '# Tools\\n\\n<tools>' -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools><|im_end|>\\n' -}}"
    "{%- elif ns.system -%}"
    "{{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' -%}"
    "{{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') -}}"
    "{%- for call in (message.tool_calls or []) -%}"
    "{{- '\\n<tool_call>\\n<function=' + call.function.name + '>\\n' -}}"
    "{%- for name, value in (call.function.arguments or {}).items() -%}"
    "{{- '<parameter=' + name + '>\\n' + (value if value is string else (value | tojson)) + '\\n</parameter>\\n' -}}"
    "{%- endfor -%}"
    "{{- '</function>\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}"
    "{{- '<think>\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


class WordTokenizerDouble(PythonBackend):
    """Rule `tokenizer`."""

    def __init__(self, **kwargs):
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {}
        self._words: list[str] = []
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return VOCAB_SIZE

    def get_vocab(self) -> dict[str, int]:
        with self._lock:
            return {**self._ids, **self.added_tokens_encoder}

    def _tokenize(self, text, **kwargs):
        return re.findall(r"\s*\S+|\s+", text)

    def _convert_token_to_id(self, token):
        with self._lock:
            if token not in self._ids:
                if FIRST_WORD_ID + len(self._words) >= VOCAB_SIZE:
                    raise ValueError("WordTokenizerDouble: vocabulary exhausted")
                self._ids[token] = FIRST_WORD_ID + len(self._words)
                self._words.append(token)
            return self._ids[token]

    def _convert_id_to_token(self, index):
        with self._lock:
            known = FIRST_WORD_ID <= index < FIRST_WORD_ID + len(self._words)
            return self._words[index - FIRST_WORD_ID] if known else ""

    def convert_tokens_to_string(self, tokens):
        return "".join(tokens)


def build_tokenizer() -> WordTokenizerDouble:
    tokenizer = WordTokenizerDouble(
        eos_token="<|im_end|>", pad_token="<|endoftext|>", additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
    )
    tokenizer.add_tokens(list(ADDED_TOKENS), special_tokens=False)
    return tokenizer


def build_model_config(model_path: str, context_length: int | None) -> SimpleNamespace:
    """Rule `model`: the attributes SGLang's tokenizer manager and OpenAI layer read from ModelConfig."""
    context_len = context_length or 32768
    hf_config = SimpleNamespace(model_type="qwen3_next", architectures=["Qwen3NextForCausalLM"])
    return SimpleNamespace(
        hf_config=hf_config, hf_text_config=hf_config, model_path=model_path, is_multimodal=False,
        is_generation=True, is_image_understandable_model=False, is_audio_understandable_model=False,
        is_embedding_gemma=False, is_matryoshka=False, matryoshka_dimensions=None, context_len=context_len,
        image_token_id=None, vocab_size=VOCAB_SIZE, hidden_size=5120, dtype="bfloat16", joint_head_config=None,
        pointer_head=None, get_default_sampling_params=lambda: {},
    )  # fmt: skip
