"""Ray's metric path in the simulator: record, push, look-back window, aggregation."""

import pytest

from dspine_lab.sim.context import MetricHistory, SimAutoscalingContext


def test_rule_window_and_push():
    history = MetricHistory(keep_s=200.0)
    for t in (0.0, 6.0, 12.0, 18.0, 24.0, 30.0, 36.0):
        history.add(t, ongoing=t / 6.0, stats={"arrivals_per_s": t})
    # at t=40 with look-back 30 s and the last push at t=30: samples 12..30 are visible
    visible = history.visible(40.0, 30.0, 30.0)
    assert [s[0] for s in visible] == [12.0, 18.0, 24.0, 30.0]
    ctx = SimAutoscalingContext(
        deployment_name="p", current_num_replicas=1, target_num_replicas=1, running_replicas=["r0"],
        visible={"r0": visible}, handle_visible=[(30.0, 4.0, None)], min_replicas=1, max_replicas=4,
        policy_state={}, last_scale_up_time=None, last_scale_down_time=None, current_time=40.0,
    )  # fmt: skip
    assert ctx.aggregated_metrics == {"arrivals_per_s": {"r0": pytest.approx(21.0)}}  # mean(12, 18, 24, 30)
    assert ctx.total_queued_requests == 4.0
    assert ctx.total_num_requests == pytest.approx(3.5 + 4.0)  # mean ongoing (2, 3, 4, 5) + handle queue
    assert ctx.raw_metrics["arrivals_per_s"]["r0"][-1].timestamp == 30.0
