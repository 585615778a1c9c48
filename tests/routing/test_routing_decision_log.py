"""The decision log (decision_log.py): the record rule with hand-built views, and the file it writes."""

import json
import math

from ray_dspine.engines.protocol import LoadSnapshot
from ray_dspine.routing.decision_log import ENV_VAR, DecisionLog, decision_record
from ray_dspine.routing.types import Decision, ReplicaView, RequestView


def view(rid, age, **load):
    return ReplicaView(rid, LoadSnapshot(**{"total_kv_tokens": 10_000, "free_kv_tokens": 10_000, **load}), age)


def test_rule_record_holds_the_report_what_the_ledger_believed_and_the_outcome_but_no_prompt():
    request = RequestView("q7", session_id="user-42", prefix_hashes=("h0", "h1", "h2"), prompt_tokens=1500,
                          max_tokens=64, needed_kv_tokens=1564)  # fmt: skip
    reported = [view("a", 0.25, pending_prefill_tokens=0, num_running=3), view("b", math.inf)]
    # the ledger added a 74,980-token placement the report could not show yet
    believed = [view("a", 0.25, pending_prefill_tokens=74_980, free_kv_tokens=9_000, num_queued=1), reported[1]]
    decision = Decision(("a",), total_scores={"a": 4.3}, rejected={"b": "never reported"}, reason="scored")
    record = decision_record(request, reported, believed, decision, now_unix_s=1_700_000_000.5)
    assert record["request_id"] == "q7" and record["session"] is True
    assert (record["prompt_tokens"], record["max_tokens"], record["prefix_blocks"]) == (1500, 64, 3)
    assert (record["ranked"], record["wait"], record["reason"]) == (["a"], False, "scored")
    a, b = record["replicas"]["a"], record["replicas"]["b"]
    assert a["reported"] == {"age_s": 0.25, "num_running": 3, "pending_prefill_tokens": 0,
                             "free_kv_tokens": 10_000, "num_queued": 0}  # fmt: skip
    assert a["believed"] == {"pending_prefill_tokens": 74_980, "free_kv_tokens": 9_000, "num_queued": 1}
    assert (a["total"], a["rejected"]) == (4.3, None)
    assert b["reported"]["age_s"] is None and (b["total"], b["rejected"]) == (None, "never reported")
    assert "user-42" not in json.dumps(record) and "h0" not in json.dumps(record)
    # a policy without a ledger: nothing believed
    assert decision_record(request, reported, None, decision, 0.0)["replicas"]["a"]["believed"] is None


def test_log_is_on_only_with_the_environment_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert DecisionLog.from_env() is None
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "decisions.jsonl"))
    log = DecisionLog.from_env()
    log.write({"n": 1})
    log.write({"n": 2})
    lines = (tmp_path / "decisions.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [{"n": 1}, {"n": 2}]
