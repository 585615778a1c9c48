import pytest

from ray_dspine.routing.prefix_index import PrefixIndex
from ray_dspine.routing.session_table import SessionTable


def test_rule_depth_is_leading_run_of_hashes():
    index = PrefixIndex()
    index.insert(["h0", "h1", "h2"], "r1")
    index.insert(["h0", "x1"], "r2")
    # r1 holds h0,h1 of the query (h9 breaks the run) -> 2; r2 holds only h0 -> 1
    assert index.depths(["h0", "h1", "h9", "h2"]) == {"r1": 2, "r2": 1}
    # a run must start at block 0: h1 alone matches nothing
    assert index.depths(["zz", "h1"]) == {}
    assert index.depths([]) == {}


def test_rule_lru_capacity_per_replica_evicts_tail_blocks_first():
    index = PrefixIndex(capacity_blocks=3)
    index.insert(["a0", "a1", "a2"], "r1")  # touch order a2, a1, a0 -> LRU order a2 (oldest), a1, a0
    index.insert(["b0"], "r1")  # 4 blocks > 3: evict a2 (tail of the older prompt)
    assert index.num_blocks("r1") == 3
    assert index.depths(["a0", "a1", "a2"]) == {"r1": 2}
    # capacity is per replica: r2 is untouched by r1's evictions
    index.insert(["a0", "a1", "a2"], "r2")
    assert index.depths(["a0", "a1", "a2"]) == {"r1": 2, "r2": 3}


def test_rule_trim_and_remove_replica():
    index = PrefixIndex()
    index.insert(["a0", "a1", "a2", "a3"], "r1")
    index.trim(2)  # keeps the 2 most recent: a1, a0
    assert index.depths(["a0", "a1", "a2"]) == {"r1": 2}
    index.remove_replica("r1")
    assert index.depths(["a0"]) == {} and index.num_blocks("r1") == 0


def test_rule_session_table_bounded_lru():
    table = SessionTable(capacity=2)
    table.record("s1", "r1")
    table.record("s2", "r2")
    assert table.last("s1") == "r1"  # lookups do not refresh recency
    table.record("s3", "r3")  # evicts s1 (least recently recorded)
    assert (table.last("s1"), table.last("s2"), table.last("s3")) == (None, "r2", "r3")
    table.record("s2", "r9")  # a session moves to the replica that served it last
    assert table.last("s2") == "r9" and len(table) == 2
    table.remove_replica("r9")
    assert table.last("s2") is None
    table.record(None, "r1")
    assert table.last(None) is None


def test_rule_resize_sets_one_replicas_capacity_and_evicts_at_once():
    index = PrefixIndex(capacity_blocks=8)
    index.insert(["a0", "a1", "a2", "a3"], "r1")
    index.insert(["a0", "a1", "a2", "a3"], "r2")
    index.resize("r1", 2)  # LRU order a3, a2 (oldest), a1, a0 -> keeps a1, a0
    assert index.capacity("r1") == 2 and index.capacity("r2") == 8
    assert index.depths(["a0", "a1", "a2", "a3"]) == {"r1": 2, "r2": 4}
    index.insert(["b0"], "r1")  # the new capacity holds on insert: evicts a1
    assert index.num_blocks("r1") == 2 and index.depths(["a0", "a1"]) == {"r1": 1, "r2": 2}
    index.remove_replica("r1")  # a replica that comes back starts from the default again
    assert index.capacity("r1") == 8
    with pytest.raises(ValueError, match="capacity_blocks must be >= 1"):
        index.resize("r2", 0)


def test_rule_depths_are_remembered_only_until_the_index_changes():
    index = PrefixIndex(capacity_blocks=8)
    index.insert(["a0", "a1"], "r1")
    query = ["a0", "a1", "a2"]
    first = index.depths(query)
    first["r1"] = 99  # a caller's copy: the remembered answer is not touched
    assert index.depths(query) == {"r1": 2}
    index.insert(["a0", "a1", "a2"], "r2")  # an insert changes the answer
    assert index.depths(query) == {"r1": 2, "r2": 3}
    index.resize("r2", 1)  # so does an eviction (keeps a0, the most recently used)
    assert index.depths(query) == {"r1": 2, "r2": 1}
    index.remove_replica("r1")
    assert index.depths(query) == {"r2": 1}
