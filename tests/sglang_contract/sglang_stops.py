"""Where SGLang 0.5.23's own code ends a request and what text it returns, for given output steps (run as a child).

    python tests/sglang_contract/sglang_stops.py < cases.json  ->  one JSON list on stdout

Input: a list of {"steps": [[token id, ...], ...], "stop": [...], "stop_regex": [...], "no_stop_trim": bool,
"stop_token_ids": [...], "max_new_tokens": int}, over the character tokenizer of tests/conftest.py (id = ord(c)
- 32; 95 is EOS). Output, per case: {"finished_len": tokens kept, "matched": the finish reason's `matched`,
"text": the answer's text}.

Rules:
  finish   SGLang's `SamplingParams.normalize` then, after each step's tokens are appended, the scheduler's own
           `Req.update_finish_state(len(step))`, until `Req.finished()`.
  text     the output ids up to finished_len (all of them when the request runs out of steps), put through
           `DetokenizerManager.trim_matched_stop` on the ids, decoded, then through it again on the text, as the
           detokenizer's finished branch does (the method reads two attributes of its manager, given here).
  modules  torchvision and sgl_kernel import as inert module doubles (tests/sglang_double/double_runtime.py):
           SGLang's scheduler module imports its config package, which imports them; nothing here calls them.
"""

from __future__ import annotations

import json
import sys
from array import array
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sglang_double"))

from double_runtime import install_module_doubles  # noqa: E402

EOS = 95


class CharTokenizer:
    eos_token_id = EOS
    additional_stop_token_ids = None

    def encode(self, text, add_special_tokens=False):
        return [ord(c) - 32 for c in text if 32 <= ord(c) < 127]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i + 32) for i in ids if i < EOS)


def run(case: dict) -> dict:
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    tokenizer = CharTokenizer()
    params = SamplingParams(
        max_new_tokens=case["max_new_tokens"], stop=case["stop"] or None, stop_regex=case["stop_regex"] or None,
        no_stop_trim=case["no_stop_trim"], stop_token_ids=case["stop_token_ids"] or None,
    )  # fmt: skip
    params.normalize(tokenizer)
    req = Req("case", "", array("q", [0]), params, eos_token_ids={EOS}, vocab_size=EOS + 1)
    req.tokenizer = tokenizer
    for step in case["steps"]:
        req.output_ids.extend(step)
        req.update_finish_state(len(step))
        if req.finished():
            break
    reason = req.finished_reason.to_json() if req.finished_reason is not None else None
    kept = req.finished_len if req.finished_len is not None else len(req.output_ids)
    manager = SimpleNamespace(is_tool_call_parser_gpt_oss=False, tool_close_token_ids=())
    ids = DetokenizerManager.trim_matched_stop(manager, list(req.output_ids)[:kept], reason, case["no_stop_trim"])
    text = DetokenizerManager.trim_matched_stop(manager, tokenizer.decode(ids), reason, case["no_stop_trim"])
    return {"finished_len": kept, "matched": None if reason is None else reason.get("matched"), "text": text}


def main() -> None:
    install_module_doubles()
    cases = json.load(sys.stdin)
    json.dump([run(case) for case in cases], sys.stdout)


if __name__ == "__main__":
    main()
