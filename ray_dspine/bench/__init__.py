"""Benchmarks that show their work: trace replay, answer equivalence, A/B reports, receipts, S3 upload.

Public replay API (imported on first use, so `import ray_dspine.bench` stays light):
- traces: `load_trace`, `Trace`, `TraceRequest`, `TraceMessage`
- statistics: `percentile`, `describe`, `bootstrap_mean_ci`, `bootstrap_ratio_ci`, `cluster_mean_ci`,
  `cluster_ratio_ci`
- records: `RequestRecord`, `read_records`, `write_records`
- replay (`ray_dspine.bench.replay.replay` runs one): `ReplayConfig`, `ReplaySink`, `StreamingClient`, `ClientSettings`
- one call from options to files: `ReplayOptions`, `run_replay`, `ReplayOutcome`
- results: `summarize`, `ReplaySummary`, `write_plots`, `Receipt`
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "load_trace": "traces",
    "Trace": "traces",
    "TraceRequest": "traces",
    "TraceMessage": "traces",
    "percentile": "stats",
    "describe": "stats",
    "bootstrap_mean_ci": "stats",
    "bootstrap_ratio_ci": "stats",
    "cluster_mean_ci": "stats",
    "cluster_ratio_ci": "stats",
    "RequestRecord": "records",
    "read_records": "records",
    "write_records": "records",
    "ReplayConfig": "replay",
    "ReplaySink": "replay",
    "StreamingClient": "client",
    "ClientSettings": "client",
    "EndpointUnreachable": "endpoint",
    "ReplayOptions": "replay_run",
    "ReplayOutcome": "replay_run",
    "run_replay": "replay_run",
    "summarize": "summary",
    "ReplaySummary": "summary",
    "write_plots": "plots",
    "Receipt": "receipt",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ray_dspine.bench' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)
