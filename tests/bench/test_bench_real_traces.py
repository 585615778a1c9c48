"""Checks on the real public traces, when ../shared/data/traces is present (skipped otherwise)."""

import pytest

from ray_dspine.bench.traces.loader import NAMED_TRACES, default_traces_dir, load_trace

TRACES = default_traces_dir()
EXPECTED = {  # name: (requests, sessions, sha256 prefix) - counts as the traces' README states them
    "mooncake": (12031, 8056, "b8cbb061a852"),
    "azure-code": (8819, 8819, "54e9a6d2a4bd"),
    "azure-conv": (19366, 19366, "2f1e5b666d4e"),
    "tau-bench": (2454, 200, "e9e6c0297660"),  # 200 runs, 1,290 text + 1,164 tool-call assistant turns
}


@pytest.mark.parametrize("name", sorted(NAMED_TRACES))
def test_real_trace_loads(name):
    if not (TRACES / NAMED_TRACES[name]).is_file():
        pytest.skip(f"{TRACES / NAMED_TRACES[name]} not present")
    trace = load_trace(name, max_prompt_tokens=2048)
    num_requests, num_sessions, sha = EXPECTED[name]
    assert (len(trace.requests), trace.num_sessions) == (num_requests, num_sessions)
    assert trace.sha256.startswith(sha)
    assert max(r.prompt_tokens for r in trace.requests) <= 2048
    arrivals = [r.arrival_s for r in trace.requests]
    assert arrivals == sorted(arrivals) and arrivals[-1] < 3600.0  # one hour of traffic (or all at 0)
