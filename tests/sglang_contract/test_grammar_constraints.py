"""The embedded engine constrains decoding as SGLang 0.5.23 does (grammar.py), judged by SGLang's own code.

  constraint  for each request body, SGLang's `ChatCompletionRequest.to_sampling_params` names the constraint
              its grammar backend gets (json_schema, regex or ebnf and its text); grammar.py's `constraint` of
              the same body, as the ingress hands it over, is the same kind and text.
  masks       SGLang's `XGrammarGrammarBackend` over the shipped model's tokenizer, one token at a time
              (`fill_vocab_mask`, `apply_vocab_mask`, `accept_token`), allows at every position of an answer the
              same tokens as grammar.py's mask of one verify block holding the whole answer as its draft, and
              after the answer only EOS on both sides.
  tags        the same for SGLang's structural tags, its legacy form and xgrammar's format, from the text
              SGLang's `to_sampling_params` hands its backend (`dispatch_structural_tag`).
  validity    a constraint SGLang's backend cannot compile (its InvalidGrammarObject) is one grammar.py refuses
              with a 400, and the other way round.
  unenforced  the measurement behind grammar.py's lists: over a one-character-a-token vocabulary, xgrammar takes
              a value that breaks each keyword of UNENFORCED (and `allOf` over two schemas, and formats outside
              ENFORCED_FORMATS) as a whole answer, and refuses one that breaks each enforced format; grammar.py
              refuses exactly the former. SGLang's own check (`validate_xgrammar_json_schema`) judges the same
              schemas alike but two: it refuses `multipleOf`, which xgrammar 0.2.7 enforces (grammar.py serves
              it), and serves `allOf` over two schemas, which xgrammar does not enforce (grammar.py refuses it).
"""

from __future__ import annotations

import json

import pytest
import torch

from ray_dspine.engines.embedded.config import EmbeddedEngineConfig
from ray_dspine.engines.embedded.grammar import Grammars, constraint, unenforced
from ray_dspine.engines.embedded.model import load_model
from ray_dspine.engines.module_stand_ins import install_module_stand_ins
from ray_dspine.engines.protocol import ChatMessage, EngineError, GenerateRequest
from ray_dspine.serve.ingress import _response_format
from ray_dspine.serve.openai_schema import ChatCompletionRequest

pytest.importorskip("sglang")
pytest.importorskip("xgrammar")

TRIP = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"]}  # fmt: skip
CASES = {  # request fields -> an answer that follows them
    "json_schema": ({"response_format": {"type": "json_schema", "json_schema": {"name": "trip", "schema": TRIP}}},
                    '{"city": "Paris", "days": 3}'),
    "json_object": ({"response_format": {"type": "json_object"}}, '{\n  "ok": [true, null, 1.5]\n}'),
    "regex": ({"regex": "[0-9]{3}-[a-z]{3}"}, "123-abc"),
    "ebnf": ({"ebnf": 'root ::= "yes" | "no" | "maybe " [0-9]'}, "maybe 7"),
}  # fmt: skip
TAGS = {  # structural tags, both of SGLang's forms -> an answer that follows them
    "legacy tag": ({"response_format": {
        "type": "structural_tag", "triggers": ["<weather>", "<note>"], "at_least_one": True,
        "structures": [{"begin": "<weather>", "schema": TRIP, "end": "</weather>"},
                       {"begin": "<note>", "end": "</note>"}]}},
        '<weather>{"city": "Rome", "days": 2}</weather>'),  # at_least_one: a tag first, no free text
    "tag format": ({"response_format": {
        "type": "structural_tag", "format": {"type": "sequence", "elements": [
            {"type": "const_string", "value": "Answer: "},
            {"type": "tag", "begin": "<json>", "content": {"type": "json_schema", "json_schema": {"type": "array"}},
             "end": "</json>"}]}}},
        'Answer: <json>[1, "a"]</json>'),
}  # fmt: skip
BROKEN = {
    "structural_tag": {"response_format": {"type": "structural_tag", "triggers": ["<b>"],
                                           "structures": [{"begin": "<a>", "end": "</a>"}]}},  # no trigger opens <a>
    "regex": {"regex": "a(b"},
    "ebnf": {"ebnf": "root ::= undefined_rule"},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}},
}


def bodies(fields: dict) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}


def ours(fields: dict) -> GenerateRequest:
    parsed = ChatCompletionRequest.model_validate(bodies(fields))
    return GenerateRequest(request_id="c", max_tokens=8, messages=[ChatMessage(role="user", content="hi")],
                           response_format=_response_format(parsed), regex=parsed.regex or None,
                           ebnf=parsed.ebnf or None)  # fmt: skip


def sglangs_constraint(fields: dict) -> tuple[str, str]:
    from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest as Theirs

    params = Theirs.model_validate(bodies(fields)).to_sampling_params(stop=[], model_generation_config={})
    (found,) = [(kind, params[kind]) for kind in ("json_schema", "regex", "ebnf", "structural_tag") if params.get(kind)]
    return found


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_constraint_is_the_one_sglang_hands_its_grammar_backend(name):
    kind, text, _param = constraint(ours(CASES[name][0]))
    assert ({"json": "json_schema"}.get(kind, kind), text) == sglangs_constraint(CASES[name][0])


@pytest.fixture(scope="module")
def side_by_side():
    install_module_stand_ins()
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammarBackend

    loaded = load_model(EmbeddedEngineConfig(dtype="fp32"))
    vocab = loaded.model.config.vocab_size
    eos = sorted(loaded.eos_token_ids)
    theirs = XGrammarGrammarBackend(loaded.tokenizer, vocab_size=vocab, model_eos_token_ids=eos)
    return loaded, Grammars(loaded.tokenizer, vocab, loaded.eos_token_ids), theirs


def sglang_grammar(backend, fields: dict):
    kind, text = sglangs_constraint(fields)
    dispatch = {"json_schema": backend.dispatch_json, "regex": backend.dispatch_regex, "ebnf": backend.dispatch_ebnf,
                "structural_tag": backend.dispatch_structural_tag}  # fmt: skip
    return dispatch[kind](text)


def allowed_rows(masked: torch.Tensor) -> list[set[int]]:
    return [set(torch.isfinite(row).nonzero().flatten().tolist()) for row in masked]


def side_by_side_rows(side_by_side, fields: dict, text: str) -> tuple[list[set[int]], list[set[int]]]:
    """The tokens allowed at each position of `text` and after it: SGLang's backend one token at a time
    (`fill_vocab_mask`, `apply_vocab_mask`, then `accept_token`, which raises on a refused token), and ours for one
    verify block holding the whole answer as its draft."""
    loaded, grammars, backend = side_by_side
    tokens = loaded.tokenizer.encode(text, add_special_tokens=False)
    vocab = loaded.model.config.vocab_size
    theirs = sglang_grammar(backend, fields)
    expected, mask = [], theirs.allocate_vocab_mask(vocab, 1, "cpu")
    for token in tokens + [None]:
        theirs.fill_vocab_mask(mask, 0)
        logits = torch.zeros(1, vocab)
        theirs.apply_vocab_mask(logits, mask)
        expected.append(set(torch.isfinite(logits[0]).nonzero().flatten().tolist()))
        if token is not None:
            theirs.accept_token(token)
    grammar = grammars.for_request(ours(fields))
    return expected, allowed_rows(grammar.mask(torch.zeros(len(tokens) + 1, vocab), tokens))


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_masks_are_sglangs_at_every_position_of_an_answer(side_by_side, name):
    expected, found = side_by_side_rows(side_by_side, *CASES[name])
    assert found == expected
    loaded = side_by_side[0]
    assert expected[-1] == set(loaded.eos_token_ids)  # complete: only EOS, on both sides
    assert 1 < len(expected[0]) < loaded.model.config.vocab_size  # the mask leaves a choice, and not every token


@pytest.mark.parametrize("name", sorted(TAGS))
def test_rule_tags_masks_are_sglangs_at_every_position_of_an_answer(side_by_side, name):
    expected, found = side_by_side_rows(side_by_side, *TAGS[name])
    assert found == expected
    assert set(side_by_side[0].eos_token_ids) <= expected[-1]  # the answer may end there (or go on: tags may follow)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_rule_validity_what_sglang_cannot_compile_is_a_400(side_by_side, name):
    from sglang.srt.constrained.base_grammar_backend import InvalidGrammarObject

    _loaded, grammars, backend = side_by_side
    assert isinstance(sglang_grammar(backend, BROKEN[name]), InvalidGrammarObject)
    with pytest.raises(EngineError) as refused:
        grammars.for_request(ours(BROKEN[name]))
    assert (refused.value.status, refused.value.code) == (400, "invalid_value")
    for fields, _text in [*CASES.values(), *TAGS.values()]:
        assert not isinstance(sglang_grammar(backend, fields), InvalidGrammarObject)
        assert grammars.for_request(ours(fields)) is not None


CHARACTERS = ["<eos>"] + [chr(code) for code in range(32, 127)]
ITEM = {"type": ["integer", "string"]}
UNENFORCED_CASES = {  # schema, a value breaking it
    "not": ({"type": "integer", "not": {"const": 3}}, "3"),
    "if": ({"type": "integer", "if": {"minimum": 5}, "then": {"maximum": 6}}, "7"),
    "then": ({"type": "integer", "if": {"minimum": 5}, "then": {"maximum": 6}}, "7"),
    "else": ({"type": "integer", "if": {"minimum": 5}, "else": {"minimum": 3}}, "1"),
    "contains": ({"type": "array", "items": ITEM, "contains": {"type": "string"}}, "[1]"),
    "minContains": ({"type": "array", "items": ITEM, "contains": {"type": "string"}, "minContains": 2}, '[1, "a"]'),
    "maxContains": ({"type": "array", "items": ITEM, "contains": {"type": "string"}, "maxContains": 1}, '["a", "b"]'),
    "uniqueItems": ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "[1, 1]"),
    "dependentRequired": ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "dependentRequired": {"a": ["b"]}}, '{"a": 1}'),
    "dependentSchemas": ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                          "dependentSchemas": {"a": {"required": ["b"]}}}, '{"a": 1}'),
    "allOf": ({"allOf": [{"type": "integer"}, {"minimum": 3}]}, "2"),
    "format regex": ({"type": "string", "format": "regex"}, '"("'),
    "format iri": ({"type": "string", "format": "iri"}, '"nope"'),
    "format idn-email": ({"type": "string", "format": "idn-email"}, '"nope"'),
}  # fmt: skip
FORMAT_BREAKERS = {  # each enforced format, a string breaking it
    "date": "nope", "date-time": "nope", "time": "nope", "duration": "nope", "email": "nope", "hostname": "-a-",
    "ipv4": "nope", "ipv6": "nope", "uri": "nope", "uri-reference": "a b", "uri-template": "{", "uuid": "nope",
    "json-pointer": "a", "relative-json-pointer": "/a",
}  # fmt: skip
ENFORCED_CASES = {"multipleOf": ({"type": "integer", "multipleOf": 3}, "4")} | {
    f"format {name}": ({"type": "string", "format": name}, json.dumps(value)) for name, value in FORMAT_BREAKERS.items()
}


def xgrammar_takes(schema: dict, answer: str) -> bool:
    """Whether xgrammar, one character a token, takes `answer` whole under `schema` (then the end token)."""
    import xgrammar

    info = xgrammar.TokenizerInfo(CHARACTERS, vocab_type=xgrammar.VocabType.RAW, stop_token_ids=[0])
    matcher = xgrammar.GrammarMatcher(xgrammar.GrammarCompiler(info).compile_json_schema(json.dumps(schema)))
    return all(matcher.accept_token(CHARACTERS.index(char)) for char in answer) and matcher.accept_token(0)


def sglang_refuses(schema: dict) -> bool:
    from sglang.srt.constrained.json_schema_validation import validate_xgrammar_json_schema

    try:
        validate_xgrammar_json_schema(schema)
    except ValueError:
        return True
    return False


@pytest.mark.parametrize("name", sorted(UNENFORCED_CASES))
def test_rule_unenforced_what_xgrammar_takes_though_it_breaks_the_schema_is_refused(name):
    schema, breaking = UNENFORCED_CASES[name]
    assert xgrammar_takes(schema, breaking)  # MEASURED: the constraint is not enforced
    assert unenforced(schema) is not None
    assert sglang_refuses(schema) == (name != "allOf")  # SGLang serves allOf over several schemas unenforced


@pytest.mark.parametrize("name", sorted(ENFORCED_CASES))
def test_rule_unenforced_what_xgrammar_enforces_is_served(name):
    schema, breaking = ENFORCED_CASES[name]
    assert not xgrammar_takes(schema, breaking)
    assert unenforced(schema) is None
    assert sglang_refuses(schema) == (name == "multipleOf")  # SGLang's one refusal of an enforced keyword
