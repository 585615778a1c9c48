"""Do the answers call what the recorded agent called? A replay's tool-call agreement.

Rule, over the ok records that carried tools (`num_tools` > 0): a `call turn` is one whose recorded reply
called functions, a `text turn` one whose recorded reply was text. Counted:
  call turns          and of them `answered_with_call` (the answer called any function) and `same_calls`
                      (the answer called the same functions in the same order as the recorded reply);
  text turns          and of them `text_turns_with_call` (the answer called a function where the agent wrote);
  `same_calls_share`  same_calls / call turns (None without call turns).
None when no ok record carried tools. Overall and per arm (summary.py).
Complexity: O(records).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from .records import RequestRecord


class ToolCallAgreement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    call_turns: int = Field(ge=0, description="Ok turns whose recorded reply called functions.")
    answered_with_call: int = Field(ge=0, description="Of them, answered with a call.")
    same_calls: int = Field(ge=0, description="Of them, answered with the recorded functions, in order.")
    text_turns: int = Field(ge=0, description="Ok turns whose recorded reply was text.")
    text_turns_with_call: int = Field(ge=0, description="Of them, answered with a call.")
    same_calls_share: float | None = Field(default=None, description="same_calls / call_turns.")


def tool_agreement(records: Sequence[RequestRecord]) -> ToolCallAgreement | None:
    """The rule above."""
    sent = [r for r in records if r.ok and r.num_tools > 0]
    if not sent:
        return None
    calls = [r for r in sent if r.recorded_calls]
    texts = [r for r in sent if not r.recorded_calls]
    same = sum(1 for r in calls if r.answer_calls == r.recorded_calls)
    return ToolCallAgreement(
        call_turns=len(calls),
        answered_with_call=sum(1 for r in calls if r.answer_calls),
        same_calls=same,
        text_turns=len(texts),
        text_turns_with_call=sum(1 for r in texts if r.answer_calls),
        same_calls_share=same / len(calls) if calls else None,
    )


def describe(agreement: ToolCallAgreement, label: str = "tool calls") -> str:
    return (f"{label}: of {agreement.call_turns} turns where the agent called, {agreement.answered_with_call} "
            f"answered with a call, {agreement.same_calls} with the agent's calls; of {agreement.text_turns} where "
            f"it wrote text, {agreement.text_turns_with_call} answered with a call")  # fmt: skip
