"""The within-SLO rule of ray_dspine/autoscale/slo.py on hand-built requests."""

import math

import numpy as np

from ray_dspine.autoscale.config import SloTargets
from ray_dspine.autoscale.slo import request_within_slo, slo_attainment, within_slo

SLO = SloTargets(ttft_slo_s=2.0, itl_slo_ms=100.0)


def test_rule_within_slo_per_request():
    # request: arrival, first token, finish, output tokens -> TTFT s, mean ITL ms (worked out by hand)
    arrival = np.array([0.0, 0.0, 1.0, 0.0, 0.0, 5.0, 0.0])
    first = np.array([1.0, 2.0, 3.5, 0.5, 1.0, math.nan, 0.2])
    finish = np.array([2.0, 2.9, 4.5, 1.0, 2.1, math.nan, 0.2])
    tokens = np.array([11, 10, 11, 6, 11, 4, 1])
    # 0: TTFT 1.0, ITL 1000 * 1.0 / 10 = 100 ms -> within (both bounds inclusive)
    # 1: TTFT 2.0 (= bound), ITL 1000 * 0.9 / 9 = 100 ms -> within
    # 2: TTFT 2.5 > 2 -> outside
    # 3: TTFT 0.5, ITL 1000 * 0.5 / 5 = 100 ms -> within
    # 4: TTFT 1.0, ITL 1000 * 1.1 / 10 = 110 ms > 100 -> outside
    # 5: failed (never finished) -> outside
    # 6: one token: no ITL, TTFT 0.2 -> within
    ok = within_slo(SLO, arrival, first, finish, tokens)
    assert ok.tolist() == [True, True, False, True, False, False, True]
    assert slo_attainment(ok) == 4 / 7  # 4 of the 7 offered requests, the failed one counted


def test_rule_scalar_form_agrees():
    assert request_within_slo(SLO, 2.0, 100.0)
    assert not request_within_slo(SLO, 2.01, 50.0)  # late first token
    assert not request_within_slo(SLO, 1.0, 100.5)  # slow decode
    assert not request_within_slo(SLO, None, None)  # never completed
    assert request_within_slo(SLO, 1.0, None)  # one output token: TTFT only


def test_rule_attainment_of_no_requests_is_one():
    assert slo_attainment(np.zeros(0, dtype=bool)) == 1.0


def test_older_keys_still_read():
    # the cluster configs spell the bounds ttft_p95_s / itl_p95_ms; they load into the same fields
    old = SloTargets.model_validate({"ttft_p95_s": 5.0, "itl_p95_ms": 30.0})
    assert (old.ttft_slo_s, old.itl_slo_ms) == (5.0, 30.0)
    assert set(old.model_dump()) == {"ttft_slo_s", "itl_slo_ms"}
