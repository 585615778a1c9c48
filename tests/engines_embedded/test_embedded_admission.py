import pytest

from ray_dspine.engines.embedded.admission import AdmissionController, Overloaded


def test_rule_admits_when_kv_and_slot_fit():
    ctl = AdmissionController(kv_budget_tokens=100, num_slots=2, max_queued_requests=4)
    ctl.enqueue("a", 60)
    ctl.enqueue("b", 30)
    assert ctl.admit() == ["a", "b"]
    assert ctl.free_kv_tokens == 10  # 100 - 60 - 30
    assert ctl.free_slots == 0


def test_rule_head_of_queue_blocks_those_behind():
    ctl = AdmissionController(kv_budget_tokens=100, num_slots=4, max_queued_requests=4)
    ctl.enqueue("a", 70)
    ctl.admit()
    ctl.enqueue("b", 50)  # does not fit (30 free)
    ctl.enqueue("c", 10)  # would fit, but waits behind b
    assert ctl.admit() == []
    assert ctl.queued_kv_tokens == 60  # what the queue will take: 50 + 10
    ctl.release("a")
    assert ctl.admit() == ["b", "c"]
    assert ctl.queued_kv_tokens == 0


def test_rule_slots_limit_running_requests():
    ctl = AdmissionController(kv_budget_tokens=1000, num_slots=1, max_queued_requests=4)
    ctl.enqueue("a", 10)
    ctl.enqueue("b", 10)
    assert ctl.admit() == ["a"]
    assert ctl.num_queued == 1


def test_rule_request_larger_than_budget_is_refused():
    ctl = AdmissionController(kv_budget_tokens=100, num_slots=1, max_queued_requests=4)
    with pytest.raises(ValueError, match="101 KV tokens"):
        ctl.enqueue("a", 101)


def test_rule_full_queue_is_overload():
    ctl = AdmissionController(kv_budget_tokens=100, num_slots=1, max_queued_requests=1)
    ctl.enqueue("a", 10)
    ctl.admit()
    ctl.enqueue("b", 10)
    with pytest.raises(Overloaded):
        ctl.enqueue("c", 10)


def test_release_is_idempotent_and_frees_queued():
    ctl = AdmissionController(kv_budget_tokens=100, num_slots=1, max_queued_requests=2)
    ctl.enqueue("a", 10)
    ctl.release("a")
    ctl.release("a")
    assert ctl.num_queued == 0 and ctl.free_kv_tokens == 100
