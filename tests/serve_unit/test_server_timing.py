"""The Server-Timing header's value and how the bench reads it (server_timing.py's rules)."""

import pytest

from ray_dspine.serve.server_timing import parse_server_timing, server_timing


def test_rule_metrics_in_order_in_milliseconds_with_one_decimal():
    # 0.0031 s = 3.1 ms; 4.8012 s = 4801.2 ms; 4.82 s = 4820.0 ms
    assert server_timing(0.0031, 4.8012, 4.82) == "parse;dur=3.1, replica;dur=4801.2, ingress;dur=4820.0"


def test_rule_replica_left_out_when_the_replica_did_not_say():
    assert server_timing(0.002, None, 0.5) == "parse;dur=2.0, ingress;dur=500.0"


def test_rule_reading_gives_seconds_by_metric():
    found = parse_server_timing("parse;dur=3.1, replica;dur=4801.2, ingress;dur=4820.0")
    assert found == pytest.approx({"parse": 0.0031, "replica": 4.8012, "ingress": 4.82})


def test_rule_reading_skips_what_does_not_parse_and_keeps_the_first_of_a_name():
    value = 'cache;desc="Hit", Replica;desc="r";dur=12.5, db;dur=abc, app;dur=inf, replica;dur=99, total;dur="7"'
    # cache: no dur; Replica: lower-cased, dur after desc; db: not a number; app: not finite; the
    # second replica is ignored; a quoted dur is read
    assert parse_server_timing(value) == pytest.approx({"replica": 0.0125, "total": 0.007})
    assert parse_server_timing(None) == {} and parse_server_timing("") == {} and parse_server_timing(" , ;") == {}
