"""Constrained decoding on the embedded engine: a request's grammar, and the logits rows it allows.

Rules:
  constraint  what SGLang 0.5.23's serving hands its grammar backend for the request: response_format
              "json_schema" -> its `schema` as JSON text (json.dumps, as SGLang's convert_json_schema_to_str),
              "json_object" -> '{"type": "object"}', "structural_tag" -> the whole response_format (rule
              `tags`), `regex`, `ebnf`; or a forced call (rule `forced`). A request carries at most one
              (request_features.py rules `grammar` and `tool_choice`); a json_schema without `schema` is
              refused (400), as SGLang.
  forced      tool_choice "required" or a named function (tools active): the answer is one call in the format
              tool_parser.py reads, `<tool_call>\\n{"name": "N", "arguments": ` A `}\\n</tool_call>`, then EOS.
              N is the named function, or any of the request's tools for "required"; A is a JSON object that
              follows the tool's `parameters` when the tool is `strict` (only a strict tool promises its
              schema, in OpenAI's API and in SGLang's tags) and any JSON object otherwise, so the call can be
              sent back in the next turn (openai_schema.py refuses other arguments). One call, parallel or not:
              OpenAI asks for at least one. SGLang's qwen25 tags differ in two ways: a named choice there allows
              a call of any of the tools, and a loose tool's arguments any JSON value.
  tags        SGLang's structural tags, in either form SGLang takes. The legacy form ({"structures": [{begin,
              schema, end}], "triggers": [...], "at_least_one"}) becomes xgrammar's tag items and
              `StructuralTag.from_legacy_structural_tag`, with at_least_one carried over; a structure without
              a schema takes any JSON. The current form ({"format": {...}}) goes to xgrammar whole, with any
              json_schema element that has no schema given an empty one (any JSON), as SGLang does. Their
              schemas fall under rule `unenforced`.
  compile     with xgrammar, SGLang's default grammar backend, as that backend compiles each kind: a JSON
              schema allowing any whitespace, a regular expression, an EBNF grammar, a structural tag. One
              compiler an engine, over its tokenizer and the model's vocabulary, made for the first constrained
              request (it reads the vocabulary only); xgrammar caches what it compiled. The engine compiles off
              its event loop, as SGLang compiles in a thread pool: xgrammar lets go of Python's lock while it
              compiles, so other requests' streams go on meanwhile. A constraint xgrammar refuses is a 400
              naming its field.
  unenforced  a JSON schema using what xgrammar 0.2.7 accepts but does not enforce is refused (400 naming its
              field, response_format or tools, the keyword and where it is), not served unchecked: the keywords
              in UNENFORCED (but `uniqueItems: false` and an empty dependentRequired or dependentSchemas, which
              ask for nothing), `allOf` over more than one schema, a `format` outside ENFORCED_FORMATS. Both lists are
              measured: tests/sglang_contract/test_grammar_constraints.py has xgrammar take a value breaking
              each unenforced one, and refuse one breaking each format. Subschemas are searched where JSON
              Schema 2020-12 puts them (properties, items, anyOf, $defs, ...), never inside instance values
              such as `const`, `enum` or `default`.
  mask        every logits row the engine chooses a token from has the tokens the grammar does not allow there
              at -inf: the first token's row, and row i of a verify block after the output and d1..di. A draft
              token the grammar refuses ends the masking: it cannot be accepted, so no row after it is read. So
              does a drafted end token the grammar accepts: the request ends at it.
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
import threading
from typing import TYPE_CHECKING

from ..protocol import EngineError, GenerateRequest
from .tool_parser import offered_tools

if TYPE_CHECKING:
    import torch

JSON_OBJECT = '{"type": "object"}'
WHAT = {"json": "JSON schema", "regex": "regular expression", "ebnf": "EBNF grammar", "call": "tool-call grammar",
        "tag": "structural tag"}  # fmt: skip


# Keywords xgrammar 0.2.7 compiles but does not enforce, and the string formats it does enforce (rule `unenforced`).
UNENFORCED = frozenset({
    "not", "if", "then", "else", "contains", "minContains", "maxContains", "uniqueItems", "dependentRequired",
    "dependentSchemas",
})  # fmt: skip
ENFORCED_FORMATS = frozenset({
    "date", "date-time", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uri", "uri-reference",
    "uri-template", "uuid", "json-pointer", "relative-json-pointer",
})  # fmt: skip
_ONE_SCHEMA = ("additionalProperties", "additionalItems", "items", "propertyNames", "unevaluatedItems",
               "unevaluatedProperties", "contentSchema")  # fmt: skip
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")


def unenforced(schema: object, where: str = "schema") -> str | None:
    """Rule `unenforced`: the first thing in `schema` xgrammar would not enforce, as "`keyword` at path"."""
    if not isinstance(schema, dict):
        return None
    for keyword in sorted(UNENFORCED & schema.keys()):
        value = schema[keyword]
        if not (value is False if keyword == "uniqueItems" else keyword.startswith("dependent") and value == {}):
            return f"`{keyword}` at {where}"
    if isinstance(schema.get("allOf"), list) and len(schema["allOf"]) > 1:
        return f"`allOf` over {len(schema['allOf'])} schemas at {where}"
    if "format" in schema and schema["format"] not in ENFORCED_FORMATS:
        return f"`format` {json.dumps(schema['format'])} at {where}"
    children = [(f"{where}.{key}", schema.get(key)) for key in _ONE_SCHEMA]
    children += [(f"{where}.{key}[{i}]", child) for key in _SCHEMA_LISTS if isinstance(schema.get(key), list)
                 for i, child in enumerate(schema[key])]  # fmt: skip
    children += [(f"{where}.{key}.{name}", child) for key in _SCHEMA_MAPS if isinstance(schema.get(key), dict)
                 for name, child in schema[key].items()]  # fmt: skip
    for path, child in children:
        found = unenforced(child, path)
        if found is not None:
            return found
    return None


def xgrammar_reason(exc: Exception) -> str:
    """The last line of an xgrammar error, without its log stamp and C++ source location."""
    lines = str(exc).strip().splitlines()
    reason = lines[-1] if lines else type(exc).__name__
    return re.sub(r"^\[[0-9:]+\] \S+:\d+: ", "", reason)


def constraint(request: GenerateRequest) -> tuple[str, str, str] | None:
    """Rule `constraint`: (kind "json" | "call" | "regex" | "ebnf", its text, the request field it came from), or
    None."""
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
    if fmt.get("type") == "structural_tag":
        return "tag", json.dumps(fmt), "response_format"
    forced = forced_tools(request)
    if forced is not None:
        return "call", json.dumps(forced, ensure_ascii=False), "tools"
    if request.regex:
        return "regex", request.regex, "regex"
    if request.ebnf:
        return "ebnf", request.ebnf, "ebnf"
    return None


def forced_tools(request: GenerateRequest) -> list[list] | None:
    """Rule `forced`: [name, the arguments' schema] of each tool the answer may call, or None when no call is
    forced."""
    if not request.tools or request.messages is None or request.tool_choice in (None, "none", "auto"):
        return None
    forced = []
    for function in (tool["function"] for tool in offered_tools(request)):
        strict = function.get("strict") and function.get("parameters")
        forced.append([function["name"], function["parameters"] if strict else {"type": "object"}])
    return forced


def _call_grammar(forced: list[list]):
    """Rule `forced` as an xgrammar Grammar: one call of one of `forced`."""
    import xgrammar

    def literal(text: str):
        return xgrammar.Grammar.from_ebnf("root ::= " + json.dumps(text, ensure_ascii=False))

    calls = [
        xgrammar.Grammar.concat(
            literal(f'<tool_call>\n{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": '),
            xgrammar.Grammar.from_json_schema(json.dumps(schema), any_whitespace=True),
            literal("}\n</tool_call>"),
        )
        for name, schema in forced
    ]
    return calls[0] if len(calls) == 1 else xgrammar.Grammar.union(*calls)


def _tag_schemas(tag: dict) -> list:
    """Rule `tags`: the JSON schemas a structural tag holds (legacy structures, or json_schema elements)."""
    if tag.get("structures") is not None:
        return [structure.get("schema") or {} for structure in tag["structures"] if isinstance(structure, dict)]
    found, stack = [], [tag.get("format")]
    while stack:
        element = stack.pop()
        if isinstance(element, dict):
            if element.get("type") in ("json_schema", "qwen_xml_parameter"):
                if element.get("json_schema") is None:
                    element["json_schema"] = {}
                found.append(element["json_schema"])
            stack += [element.get("content"), *(element.get("elements") or []), *(element.get("tags") or [])]
    return found


def _structural_tag(tag: dict):
    """Rule `tags`: what xgrammar's compile_structural_tag takes for `tag`."""
    import xgrammar

    if tag.get("structures") is None:
        _tag_schemas(tag)  # fills each json_schema element's missing schema
        return json.dumps(tag)
    items = [
        xgrammar.StructuralTagItem(begin=s["begin"], schema=json.dumps({} if s.get("schema") is None else s["schema"]),
                                   end=s["end"])
        for s in tag["structures"]
    ]  # fmt: skip
    converted = xgrammar.StructuralTag.from_legacy_structural_tag(items, tag.get("triggers") or [])
    converted.format.at_least_one = bool(tag.get("at_least_one", False))
    return converted


class Grammars:
    """One engine's grammar compiler (rule `compile`)."""

    def __init__(self, tokenizer, vocab_size: int, eos_token_ids: frozenset[int]) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._eos_token_ids = sorted(eos_token_ids)
        self._compiler = None
        self._making = threading.Lock()  # requests compile on worker threads

    def _prepare(self) -> None:
        """Make the compiler, once."""
        with self._making:
            if self._compiler is None:
                import xgrammar

                info = xgrammar.TokenizerInfo.from_huggingface(
                    self._tokenizer, vocab_size=self._vocab_size, stop_token_ids=self._eos_token_ids
                )
                self._compiler = xgrammar.GrammarCompiler(info)

    def for_request(self, request: GenerateRequest) -> "RequestGrammar | None":
        found = constraint(request)
        if found is None:
            return None
        kind, text, param = found
        if kind == "json":
            _check_enforced(text, param)
        if kind == "call":
            for _name, schema in json.loads(text):
                _check_enforced(json.dumps(schema), param)
        if kind == "tag":
            for schema in _tag_schemas(json.loads(text)):
                _check_enforced(json.dumps(schema), param)
        import xgrammar

        self._prepare()
        try:
            if kind == "json":
                compiled = self._compiler.compile_json_schema(text, any_whitespace=True)
            elif kind == "call":
                compiled = self._compiler.compile_grammar(_call_grammar(json.loads(text)))
            elif kind == "tag":
                compiled = self._compiler.compile_structural_tag(_structural_tag(json.loads(text)))
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


def _check_enforced(text: str, param: str) -> None:
    """Rule `unenforced` for a JSON schema's text (text that is not JSON is xgrammar's to refuse)."""
    try:
        schema = json.loads(text)
    except ValueError:
        return
    found = unenforced(schema)
    if found is not None:
        raise EngineError(
            f"{param}: the JSON schema uses {found}, which xgrammar (the grammar engine) accepts but does not "
            "enforce; remove it, or check the answer yourself",
            status=400, param=param, code="invalid_value",
        )  # fmt: skip


class RequestGrammar:
    """One request's place in its grammar (rules `mask` and `end`)."""

    def __init__(self, matcher) -> None:
        self._matcher = matcher

    def mask(self, logits: torch.Tensor, draft: list[int]) -> torch.Tensor:
        """Rule `mask`: `logits` (rows after the output, then after each of `draft`) as float32, masked."""
        import xgrammar

        rows, vocab = logits.shape
        bitmask = xgrammar.allocate_token_bitmask(rows, vocab)
        filled = accepted = 0
        for row in range(rows):
            self._matcher.fill_next_token_bitmask(bitmask, row)
            filled += 1
            if row == rows - 1 or not self._matcher.accept_token(draft[row]):
                break
            accepted += 1
            if self._matcher.is_terminated():
                break  # a drafted end token ended the grammar: the request ends there, no later row is read
        if accepted:
            self._matcher.rollback(accepted)  # the draft tokens are taken back
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
