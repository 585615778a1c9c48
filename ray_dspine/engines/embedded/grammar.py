"""Constrained decoding on the embedded engine: a request's grammar, and the logits rows it allows.

Rules:
  constraint  what SGLang 0.5.23's serving hands its grammar backend for the request: response_format
              "json_schema" -> its `schema` as JSON text (json.dumps, as SGLang's convert_json_schema_to_str),
              "json_object" -> '{"type": "object"}', `regex`, `ebnf`. A request carries at most one
              (request_features.py rule `grammar`); a json_schema without `schema` is refused (400), as SGLang.
  compile     with xgrammar, SGLang's default grammar backend, as that backend compiles each kind: a JSON
              schema allowing any whitespace, a regular expression, an EBNF grammar. One compiler an engine, over
              its tokenizer and the model's vocabulary, made on the first constrained request; xgrammar caches
              what it compiled. A constraint xgrammar refuses is a 400 naming its field.
  mask        every logits row the engine chooses a token from has the tokens the grammar does not allow there
              at -inf: the first token's row, and row i of a verify block after the output and d1..di. A draft
              token the grammar refuses ends the masking: it cannot be accepted, so no row after it is read.
  end         once the grammar is complete it allows only the model's EOS tokens (the stop tokens SGLang's
              xgrammar backend gives xgrammar); the token that ends it ends the request ("stop", that token
              matched), under ignore_eos too, as SGLang finishes a request whose grammar terminated.
  min_tokens  a row where min_tokens (which masks the end tokens) leaves the grammar no token keeps the
              grammar's own mask: the grammar is complete, so the request ends.
Greedy output stays the same with and without speculation: each row is masked by what the grammar allows after
exactly the tokens before it. Complexity: a mask is one xgrammar fill per row (microseconds for the shipped
model's 49,152 tokens once a grammar state is cached) plus one pass over the row.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from ..protocol import EngineError, GenerateRequest

if TYPE_CHECKING:
    import torch

JSON_OBJECT = '{"type": "object"}'
WHAT = {"json": "JSON schema", "regex": "regular expression", "ebnf": "EBNF grammar"}


def xgrammar_reason(exc: Exception) -> str:
    """The last line of an xgrammar error, without its log stamp and C++ source location."""
    lines = str(exc).strip().splitlines()
    reason = lines[-1] if lines else type(exc).__name__
    return re.sub(r"^\[[0-9:]+\] \S+:\d+: ", "", reason)


def constraint(request: GenerateRequest) -> tuple[str, str, str] | None:
    """Rule `constraint`: (kind "json" | "regex" | "ebnf", its text, the request field it came from), or None."""
    fmt = request.response_format or {}
    if fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        if schema is None:
            raise EngineError(
                'response_format.json_schema needs a `schema` (the JSON schema the answer must follow)',
                status=400, param="response_format", code="invalid_value",
            )  # fmt: skip
        return "json", schema if isinstance(schema, str) else json.dumps(schema), "response_format"
    if fmt.get("type") == "json_object":
        return "json", JSON_OBJECT, "response_format"
    if request.regex:
        return "regex", request.regex, "regex"
    if request.ebnf:
        return "ebnf", request.ebnf, "ebnf"
    return None


class Grammars:
    """One engine's grammar compiler (rule `compile`), made on first use."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: frozenset[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._eos_token_ids = sorted(eos_token_ids)
        self._compiler = None

    def for_request(self, request: GenerateRequest) -> "RequestGrammar | None":
        found = constraint(request)
        if found is None:
            return None
        kind, text, param = found
        import xgrammar

        if self._compiler is None:
            info = xgrammar.TokenizerInfo.from_huggingface(
                self._tokenizer, vocab_size=self._vocab_size, stop_token_ids=self._eos_token_ids
            )
            self._compiler = xgrammar.GrammarCompiler(info)
        try:
            if kind == "json":
                compiled = self._compiler.compile_json_schema(text, any_whitespace=True)
            elif kind == "regex":
                compiled = self._compiler.compile_regex(text)
            else:
                compiled = self._compiler.compile_grammar(text)
        except Exception as exc:  # xgrammar's own errors (RuntimeError, InvalidJSONError, ...): the client's input
            raise EngineError(
                f"{param}: the {WHAT[kind]} does not compile: {xgrammar_reason(exc)}", status=400, param=param,
                code="invalid_value",
            ) from exc
        return RequestGrammar(xgrammar.GrammarMatcher(compiled))


class RequestGrammar:
    """One request's place in its grammar (rules `mask` and `end`)."""

    def __init__(self, matcher) -> None:
        self._matcher = matcher

    def mask(self, logits: torch.Tensor, draft: list[int]) -> torch.Tensor:
        """Rule `mask`: `logits` (rows after the output, then after each of `draft`) as float32, masked."""
        import xgrammar

        rows, vocab = logits.shape
        bitmask = xgrammar.allocate_token_bitmask(rows, vocab)
        filled = 0
        for row in range(rows):
            self._matcher.fill_next_token_bitmask(bitmask, row)
            filled += 1
            if row == rows - 1 or not self._matcher.accept_token(draft[row]):
                break
        if filled > 1:  # every row but the last filled one accepted its draft token
            self._matcher.rollback(filled - 1)
        masked = logits.float().clone()
        xgrammar.apply_token_bitmask_inplace(masked[:filled], bitmask[:filled])
        return masked

    def advance(self, tokens: list[int]) -> int | None:
        """Feeds the emitted `tokens`; the position of the one that ended the grammar (rule `end`), or None."""
        for position, token in enumerate(tokens):
            self._matcher.accept_token(token)
            if self._matcher.is_terminated():
                return position
        return None
