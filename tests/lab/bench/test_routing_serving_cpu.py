"""The rules of routing_serving_cpu.py: the serving path's CPU seconds per replay."""

import pytest

from dspine_lab.bench.routing_serving_cpu import PARTS, format_serving_cpu, spent


def test_rule_reading_names_the_four_parts():
    assert PARTS == ("client", "proxy", "ingress", "replicas")


def test_rule_spent_is_after_less_before_per_part_and_summed():
    # client 10.0 -> 16.5 (6.5 s), proxy 3.0 -> 12.5 (9.5), ingress 5.0 -> 21.0 (16.0), replicas 20.0 -> 34.0
    # (14.0): total 46.0 s over 400 requests = 115 ms a request
    before = {"client": 10.0, "proxy": 3.0, "ingress": 5.0, "replicas": 20.0}
    after = {"client": 16.5, "proxy": 12.5, "ingress": 21.0, "replicas": 34.0}
    cpu = spent(before, after, 400)
    assert (cpu.client_s, cpu.proxy_s, cpu.ingress_s, cpu.replicas_s) == (6.5, 9.5, 16.0, 14.0)
    assert cpu.total_s == pytest.approx(46.0)
    assert cpu.per_request_ms == pytest.approx(115.0)


def test_rule_missing_a_part_unread_is_none_and_so_is_the_total():
    before = {"client": 1.0, "proxy": None, "ingress": 2.0, "replicas": 3.0}
    after = {"client": 2.0, "proxy": 5.0, "ingress": 4.0, "replicas": 7.0}
    cpu = spent(before, after, 10)
    assert cpu.proxy_s is None and cpu.client_s == 1.0 and cpu.ingress_s == 2.0 and cpu.replicas_s == 4.0
    assert cpu.total_s is None and cpu.per_request_ms is None
    assert spent(after, after, 0).per_request_ms is None  # no request sent


def test_format_one_line_per_replay():
    cpu = spent({"client": 0.0, "proxy": 0.0, "ingress": 0.0, "replicas": 0.0},
                {"client": 6.6, "proxy": 9.3, "ingress": 15.9, "replicas": 13.7}, 419)  # fmt: skip
    (line,) = format_serving_cpu("headroom", [cpu])
    assert line == (
        "headroom     replay 1: serving-path CPU s: client 6.6, proxy 9.3, ingress 15.9, replicas 13.7; "
        "total 45.5 (109 ms a request)"
    )
