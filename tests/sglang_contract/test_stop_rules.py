"""The embedded engine ends a request where SGLang 0.5.23 ends it, with the text SGLang returns.

SGLang's side is its own scheduler and detokenizer code (sglang_stops.py, run once as a child). Ours is the
engine's emit path (sequence.py `emit_verified` with detokenizer.py). Every case's outcome is worked out by
hand below over the character tokenizer (one token per character; EOS is id 95). matched_stop, SGLang's name for
what ended the request, is the stop string, the pattern as given, or the end token's id (1 for "!", 95 for EOS):

  stop string       "hello E" then "ND more", stop "END": the stop completes at the 9th token ("hello END");
                    9 tokens, text "hello " (with no_stop_trim, "hello END"); matched "END".
  pattern           "abc " / "12 34" / "5 tail", stop_regex \\d{3}: "345" completes at the 10th token; 10 tokens,
                    text "abc 12 345" (SGLang keeps a pattern's match); matched "\\d{3}".
  anchored pattern  one verify step "xEND yz", stop_regex END$: the whole step does not end with END, its 4-token
                    prefix does; 4 tokens, text "xEND"; matched "END$".
  literal pattern   "say END now", stop_regex END: matches at 7 tokens, "say END"; SGLang trims a pattern's own text
                    as it trims a stop string, so the text is "say " (with no_stop_trim, "say END"); matched "END".
  string first      "xAByy", stop "B" and stop_regex AB: both complete at the 3rd token; the stop string wins, text
                    "xA", matched "B".
  stop token id     "hi! there", stop_token_ids ["!"]: 3 tokens, text "hi" (with no_stop_trim, "hi!"); matched 1.
  eos               "ab", EOS, "cd": 3 tokens, text "ab" (with no_stop_trim too: EOS has no text); matched 95.
  earliest          "axbyy", stops ["yy", "x"]: "x" completes at the 2nd token; 2 tokens, text "a", matched "x".
                    Here SGLang's answer depends on how the tokens come in steps: one token per step it agrees, but
                    with the five in one verify step it takes the stops in the request's order, so "yy" ends it:
                    5 tokens, "axb", matched "yy".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ray_dspine.engines.embedded.detokenizer import IncrementalDetokenizer
from ray_dspine.engines.embedded.sequence import Sequence, emit_verified

SCRIPT = Path(__file__).resolve().parent / "sglang_stops.py"
EOS = 95


class CharTokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i + 32) for i in ids if i < EOS)


def ids(text: str) -> list[int]:
    return [ord(c) - 32 for c in text]


def case(steps, stop=(), stop_regex=(), no_stop_trim=False, stop_token_ids=()) -> dict:
    return {"steps": [ids(s) if isinstance(s, str) else s for s in steps], "stop": list(stop),
            "stop_regex": list(stop_regex), "no_stop_trim": no_stop_trim,
            "stop_token_ids": [ids(t)[0] for t in stop_token_ids], "max_new_tokens": 64}  # fmt: skip


BANG = 1  # the id of "!"

# name -> (case, (tokens kept, text, matched_stop)), as worked out in the module's docstring
CASES = {
    "stop string": (case(["hello E", "ND more"], stop=["END"]), (9, "hello ", "END")),
    "stop string kept": (case(["hello E", "ND more"], stop=["END"], no_stop_trim=True), (9, "hello END", "END")),
    "pattern": (case(["abc ", "12 34", "5 tail"], stop_regex=[r"\d{3}"]), (10, "abc 12 345", r"\d{3}")),
    "anchored pattern": (case(["xEND yz"], stop_regex=["END$"]), (4, "xEND", "END$")),
    "literal pattern": (case(["say END now"], stop_regex=["END"]), (7, "say ", "END")),
    "literal pattern kept": (case(["say END now"], stop_regex=["END"], no_stop_trim=True), (7, "say END", "END")),
    "string first": (case(["xAByy"], stop=["B"], stop_regex=["AB"]), (3, "xA", "B")),
    "stop token id": (case(["hi! there"], stop_token_ids=["!"]), (3, "hi", BANG)),
    "stop token id kept": (case(["hi! there"], stop_token_ids=["!"], no_stop_trim=True), (3, "hi!", BANG)),
    "eos": (case([ids("ab") + [EOS] + ids("cd")]), (3, "ab", EOS)),
    "eos kept": (case([ids("ab") + [EOS] + ids("cd")], no_stop_trim=True), (3, "ab", EOS)),
    "earliest": (case(["axbyy"], stop=["yy", "x"]), (2, "a", "x")),
}
SGLANG_BY_STEPS = {"earliest": (5, "axb", "yy")}  # where SGLang's answer depends on the steps (docstring)


def one_per_step(spec: dict) -> dict:
    return {**spec, "steps": [[token] for step in spec["steps"] for token in step]}


def ours(spec: dict) -> tuple[int, str]:
    seq = Sequence(
        request_id="case", prompt_ids=[0], max_tokens=spec["max_new_tokens"], temperature=0.0, top_p=1.0,
        eos_token_ids=frozenset({EOS}),
        detokenizer=IncrementalDetokenizer(CharTokenizer(), spec["stop"], spec["stop_regex"], spec["no_stop_trim"]),
        drafter=None, generator=None, histogram_size=33, stop_token_ids=frozenset(spec["stop_token_ids"]),
        no_stop_trim=spec["no_stop_trim"],
    )  # fmt: skip
    text = ""
    for step in spec["steps"]:
        text += emit_verified(seq, list(step), list(step[1:])).text
        if seq.finished is not None:
            break
    assert seq.finished == "stop"
    return len(seq.output_ids), text, seq.matched_stop


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_engine_ends_each_case_as_worked_out_by_hand_however_its_tokens_come_in_steps(name):
    """Where it ends, its text, and what it names as matched_stop."""
    spec, expected = CASES[name]
    assert ours(spec) == expected
    assert ours(one_per_step(spec)) == expected


@pytest.fixture(scope="module")
def sglang_answers() -> dict:
    pytest.importorskip("sglang")
    specs = [spec for spec, _ in CASES.values()] + [one_per_step(spec) for spec, _ in CASES.values()]
    done = subprocess.run([sys.executable, str(SCRIPT)], input=json.dumps(specs), capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout)
    return dict(zip(CASES, zip(answers[: len(CASES)], answers[len(CASES) :])))


@pytest.mark.parametrize("name", sorted(CASES))
def test_sglangs_own_code_ends_each_case_where_the_engine_does(name, sglang_answers):
    _, expected = CASES[name]
    by_steps, one_by_one = sglang_answers[name]
    assert (one_by_one["finished_len"], one_by_one["text"], one_by_one["matched"]) == expected
    assert (by_steps["finished_len"], by_steps["text"], by_steps["matched"]) == SGLANG_BY_STEPS.get(name, expected)
