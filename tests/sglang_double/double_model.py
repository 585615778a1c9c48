"""The model double: the text the server double "generates", one piece of text per output token, read off the prompt.

There are no weights; the output is a function of the prompt the chat template rendered (as a model's
would be) and of the request's sampling limits, never of the request body itself.

Rules (P = the prompt decoded by the tokenizer, N = max_new_tokens):
  tools      P's last system turn lists tools (`<tools>` ... `</tools>`, one JSON object per line: SGLang
             passes only the named tool when tool_choice names one, and none with tool_choice "none"):
             one qwen3_coder call of the first tool listed, with `count` = N:
             `<tool_call>`, `\\n<function=NAME>`, `\\n<parameter=count>`, `\\nN`, `\\n</parameter>`,
             `\\n</function>`, `\\n</tool_call>`, then eos (7 pieces + eos = 8 tokens).
  thinking   otherwise, when P ends with an open `<think>\\n` (the template's thinking-on prompt): THINK_WORDS
             words "t0 " "t1 " "t2 ", then `</think>`, then the answer words "t3 " "t4 " ... up to N tokens.
  plain      otherwise: words "t0 " "t1 " ... up to N tokens.
  words      word i is "t<i> " (i counts words only, not tags); every piece is one token.
  eos        only a tool call ends with eos (finish "stop", matched = eos id, no text); everything else runs
             until N tokens (finish "length").
  stop       a stop string (sampling_params.stop_strs) that appears in the generated text ends generation
             with the piece that completes it, which counts as a token (finish "stop", matched = the string);
             the text before the string is kept, the string and what follows it in that piece are dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from double_tokenizer import THINK_END, THINK_START

THINK_WORDS = 3


@dataclass(frozen=True)
class Piece:
    text: str
    eos: bool = False


def tools_in(prompt: str) -> list[dict]:
    start, end = prompt.rfind("<tools>"), prompt.rfind("</tools>")
    if start < 0 or end < start:
        return []
    lines = prompt[start + len("<tools>"):end].strip().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def plan(prompt: str, max_new_tokens: int) -> list[Piece]:
    """The pieces for one request (rules above), at most max_new_tokens of them."""
    tools = tools_in(prompt)
    if tools:
        name = tools[0].get("function", tools[0]).get("name")
        texts = ["<tool_call>", f"\n<function={name}>", "\n<parameter=count>", f"\n{max_new_tokens}",
                 "\n</parameter>", "\n</function>", "\n</tool_call>"]
        pieces = [Piece(text) for text in texts] + [Piece("", eos=True)]
    elif prompt.endswith(f"{THINK_START}\n"):
        words = [Piece(f"t{i} ") for i in range(max_new_tokens)]
        pieces = words[:THINK_WORDS] + [Piece(THINK_END)] + words[THINK_WORDS:]
    else:
        pieces = [Piece(f"t{i} ") for i in range(max_new_tokens)]
    return pieces[:max_new_tokens]


def stop_in(text: str, stops: list[str]) -> tuple[int, str] | None:
    """(position, stop string) of the earliest stop string in text, or None."""
    found = [(text.find(stop), stop) for stop in stops if stop and stop in text]
    return min(found) if found else None
