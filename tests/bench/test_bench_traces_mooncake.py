"""Mooncake parsing: the session rule and the arrival rule, on hand-made hash_ids."""

import json

import numpy as np
import pytest

from ray_dspine.bench.traces.mooncake import find_parents, parse_mooncake, read_rows, spread_arrivals
from ray_dspine.bench.traces.synthetic import render_synthetic

# (timestamp ms, input_length, hash_ids). A request's key is its full blocks: hash_ids[: input // 512].
ROWS = [
    (0, 1100, [0, 1, 2]),  # 0: key [0, 1]                      -> new session A
    (0, 600, [0, 3]),  # 1: key [0] (1 block)                    -> new session B
    (3000, 1600, [0, 1, 4, 5]),  # 2: row 0's key [0,1] is a prefix, 2 >= 2 blocks -> A; key [0,1,4]
    (3000, 700, [0, 3, 6]),  # 3: only row 1's key [0] matches, 1 < 2 blocks -> new session C
    (6000, 2100, [0, 1, 4, 5, 7]),  # 4: rows 0 ([0,1]) and 2 ([0,1,4]) match; longest is row 2 -> A
    (6000, 1030, [0, 1, 8]),  # 5: row 0's key [0,1] matches (a branch of A) -> A
    (9000, 512, [9]),  # 6: no match -> new session D; key [9]
    (9000, 1536, [9, 10, 11]),  # 7: row 6's key [9] is 1 block < 2 -> new session E
]


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "mini_mooncake.jsonl"
    path.write_text(
        "\n".join(
            json.dumps({"timestamp": t, "input_length": n, "output_length": 7, "hash_ids": h}) for t, n, h in ROWS
        )
    )
    return path


def test_rule_session_parent_is_longest_full_block_prefix(trace_file):
    rows = read_rows(trace_file)
    assert find_parents(rows) == [None, None, 0, None, 2, 0, None, None]


def test_rule_session_min_shared_blocks(trace_file):
    rows = read_rows(trace_file)
    # With one shared block enough, row 3 chains to row 1 (key [0]) and row 7 to row 6 (key [9]); row 1
    # ([0, 3]) still has none (row 0's key [0, 1] is no prefix of it);
    # row 2 still prefers row 0's 2-block key over row 1's 1-block key.
    assert find_parents(rows, min_shared_blocks=1) == [None, None, 0, 1, 2, 0, None, 6]


def test_rule_session_ties_go_to_latest(tmp_path):
    path = tmp_path / "ties.jsonl"
    rows = [(0, 1024, [0, 1]), (0, 1024, [0, 1]), (3000, 2000, [0, 1, 2, 3])]
    path.write_text("\n".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1, "hash_ids": h})
                              for t, n, h in rows))
    # Rows 0 and 1 offer the same key [0, 1]; the later one (1) wins, and itself chains to row 0.
    assert find_parents(read_rows(path)) == [None, 0, 1]


def test_sessions_and_turns(trace_file):
    requests = parse_mooncake(trace_file, seed=0, max_prompt_tokens=None)
    sessions = [r.session_id for r in requests]
    a, b, c, d, e = "mooncake-s000000", "mooncake-s000001", "mooncake-s000003", "mooncake-s000006", "mooncake-s000007"
    assert sessions == [a, b, a, c, a, a, d, e]
    assert [r.turn_index for r in requests] == [0, 0, 1, 0, 2, 3, 0, 0]
    assert {r.workload_class for r in requests} == {"chat"}
    assert requests[4].prefix_block_ids == [0, 1, 4, 5, 7]
    assert [r.max_tokens for r in requests] == [7] * 8


def test_rule_arrivals_spread_inside_each_step():
    arrivals = spread_arrivals([0, 0, 3000, 6000, 6000, 6000], step_ms=3000, seed=5)
    # Same formula by hand: sorted uniforms scaled to the 3 s step, group by group, one generator.
    rng = np.random.default_rng(5)
    expected = [*(np.sort(rng.random(2)) * 3.0), *(3.0 + np.sort(rng.random(1)) * 3.0),
                *(6.0 + np.sort(rng.random(3)) * 3.0)]
    assert arrivals == pytest.approx(expected)
    assert 0 <= arrivals[0] <= arrivals[1] < 3.0 <= arrivals[2] < 6.0 <= arrivals[3] <= arrivals[4] <= arrivals[5] < 9
    assert spread_arrivals([0, 0, 3000], step_ms=3000, seed=5) == spread_arrivals([0, 0, 3000], step_ms=3000, seed=5)
    assert spread_arrivals([0, 0], step_ms=3000, seed=5) != spread_arrivals([0, 0], step_ms=3000, seed=6)


def test_shared_hash_ids_share_prompt_text(trace_file):
    requests = parse_mooncake(trace_file, seed=0, max_prompt_tokens=None)
    first, second = render_synthetic(requests[0].synthetic_prompt), render_synthetic(requests[2].synthetic_prompt)
    assert len(first) == 1100 * 4 and len(second) == 1600 * 4  # 4 characters per token
    assert first[: 2 * 2048] == second[: 2 * 2048]  # blocks 0 and 1 are shared: 2 x 2,048 characters
    assert first[2 * 2048 :] != second[2 * 2048 : 1100 * 4]  # block 2 vs block 4 differ


def test_clamp_keeps_leading_blocks(trace_file):
    requests = parse_mooncake(trace_file, seed=0, max_prompt_tokens=600)
    r = requests[4]  # 2,100 tokens over 5 blocks -> 600 tokens over ceil(600/512) = 2 blocks
    assert (r.prompt_tokens, r.recorded_prompt_tokens, r.clamped) == (600, 2100, True)
    assert r.synthetic_prompt.block_ids == [0, 1]
    assert len(render_synthetic(r.synthetic_prompt)) == 2400
    assert not requests[6].clamped  # 512 <= 600
