"""Produce what SGLang 0.5.23's own code emits for /v1/loads and /metrics, from given pool states (run as a child).

    python tests/sglang_contract/sglang_outputs.py < spec.json  ->  one JSON object on stdout

Input: {"argv": [launch_server arguments], "include": "core,memory,spec",
        "loads": [LoadSnapshot fields, with "memory" / "speculative" as dicts of their fields],
        "stats": [{"labels": {...}, "fields": {SchedulerStats fields; QueueCount ones as ints}}]}
Output: {"loads_body": the JSON of SGLang's /v1/loads route (`sglang.srt.entrypoints.v1_loads.get_loads`) for
         those snapshots, "metrics_text": Prometheus text of SGLang's SchedulerMetricsCollector after
         `log_stats` of each entry of "stats" under its labels, "declared": {metric family name: type} of every
         metric the collector declares}.

Rules:
  context   the config bags are projected from SGLang's `prepare_server_args(argv)` with
            `RuntimeContext.set_server_args`, inside `use_context` (no resolution: it needs config.json and a GPU).
  loads     the route's tokenizer manager is a stand-in whose `get_loads` returns the given snapshots (a server's
            reads them from the schedulers' shared memory); everything else is the route's own code.
  metrics   the collector's prometheus classes are injected through its own `_gauge_cls` / `_counter_cls` /
            `_histogram_cls` / `_summary_cls` hooks: real prometheus_client classes registered in one private
            registry, one object per metric name (so the collectors of several ranks share series, as the
            multiprocess registry of a server merges them). SGLang's GaugeHistogram (routing-key buckets) is
            swapped for the same kind of gauge in that registry.
  modules   torchvision and sgl_kernel import as inert module doubles (tests/sglang_double/double_runtime.py):
            SGLang's config package imports them, nothing here calls them. That is why this runs as a child.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sglang_double"))

from double_runtime import install_module_doubles  # noqa: E402


def _registry_classes():
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary

    registry, made = CollectorRegistry(), {}

    def bound(cls):
        def make(name, documentation, labelnames=(), **kwargs):
            kwargs.pop("multiprocess_mode", None)
            if name not in made:
                made[name] = cls(name, documentation, labelnames=list(labelnames), registry=registry, **kwargs)
            return made[name]

        return make

    class GaugeHistogram:
        def __init__(self, name, documentation, labelnames, bucket_bounds, multiprocess_mode="mostrecent"):
            self._gauge = bound(Gauge)(name, documentation, list(labelnames) + ["gt", "le"])

        def set_by_current_observations(self, labels, observations) -> None:
            return None

    return registry, bound(Gauge), bound(Counter), bound(Histogram), bound(Summary), GaugeHistogram


def main() -> int:
    spec = json.loads(sys.stdin.read())
    install_module_doubles()
    from prometheus_client import generate_latest

    from sglang.srt.entrypoints import v1_loads
    from sglang.srt.managers.load_snapshot import LoadSnapshot, MemoryMetrics, SpeculativeMetrics
    from sglang.srt.observability import metrics_collector
    from sglang.srt.observability.metrics_collector import QueueCount, SchedulerMetricsCollector, SchedulerStats
    from sglang.srt.runtime_context import ParallelContext, RuntimeContext, use_context
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(spec["argv"])
    context = RuntimeContext(parallel=ParallelContext())
    context.set_server_args(server_args)
    registry, gauge, counter, histogram, summary, gauge_histogram = _registry_classes()
    metrics_collector.GaugeHistogram = gauge_histogram

    class Collector(SchedulerMetricsCollector):
        _gauge_cls, _counter_cls = staticmethod(gauge), staticmethod(counter)
        _histogram_cls, _summary_cls = staticmethod(histogram), staticmethod(summary)

    def snapshot(fields: dict) -> LoadSnapshot:
        fields = dict(fields)
        if fields.get("memory") is not None:
            fields["memory"] = MemoryMetrics(**fields["memory"])
        if fields.get("speculative") is not None:
            fields["speculative"] = SpeculativeMetrics(**fields["speculative"])
        return LoadSnapshot(**fields)

    class LoadsSource:  # the schedulers' shared-memory snapshots, as the route's tokenizer manager reads them
        async def get_loads(self, include=None, dp_rank=None):
            return [snapshot(fields) for fields in spec["loads"]]

    with use_context(context):
        body = asyncio.run(v1_loads.get_loads(dp_rank=None, include=spec.get("include"), format=None,
                                              tokenizer_manager=LoadsSource()))  # fmt: skip
        for entry in spec.get("stats") or [{"labels": {"model_name": "m", "engine_type": "unified", "tp_rank": 0,
                                                         "pp_rank": 0, "moe_ep_rank": 0}, "fields": {}}]:  # fmt: skip
            collector = Collector(labels=entry["labels"], server_args=server_args)
            fields = dict(entry["fields"])
            for name in ("num_running_reqs", "num_queue_reqs"):
                if name in fields:
                    fields[name] = QueueCount(total=fields[name])
            collector.log_stats(SchedulerStats(**fields))
    declared = {family.name: family.type for family in registry.collect()}
    print(json.dumps({"loads_body": body, "metrics_text": generate_latest(registry).decode(), "declared": declared}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
