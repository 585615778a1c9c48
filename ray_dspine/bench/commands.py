"""The `ray-dspine bench` commands that live in this package, registered in one place."""

from __future__ import annotations

from . import ab_report_cli, engine_bench, equivalence_cli, replay_cli, s3


def register(subparsers) -> None:
    engine_bench.register(subparsers)
    replay = replay_cli.register(subparsers, after_write=[s3.maybe_upload])
    s3.register_s3_option(replay)
    equivalence_cli.register_equivalence(subparsers)
    ab_report_cli.register_ab_report(subparsers)
