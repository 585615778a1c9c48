"""Per-replica gauges of an engine that supervises a server process (sglang), through `ray.serve.metrics`.

Gauges (tag `pool`; Ray adds deployment, replica and application; Prometheus sees them as `ray_<name>`):
  dspine_drafter_fallback  1 while a drafter pool serves (or restarts) without its drafter because it lost
                           it (crashes, start-up timeouts or hangs with the drafter on, or a drafter probe that
                           showed no speculation), else 0. An operator's drafter switch-off is not a fallback.
  dspine_config_error      1 while the server refuses its arguments (state "config_error"), else 0.
  dspine_server_crashes    crashes since the replica started: exits, start-up timeouts, hangs, silent probes.
An engine without supervision (embedded, simulated) reports 0 for all three. Alert rules on them:
observability/alerts.yml. Refreshed from `record_routing_stats`, every routing stats period.
"""

from __future__ import annotations

from typing import Any, Callable

TAGS = ("pool",)


class SupervisionMetrics:
    """Holds the gauges; `gauge` builds one (default `ray.serve.metrics.Gauge`), so tests can record."""

    def __init__(self, pool: str, gauge: Callable[..., Any] | None = None):
        if gauge is None:
            from ray.serve import metrics

            gauge = metrics.Gauge
        self._tags = {"pool": pool}
        self.drafter_fallback = gauge(
            "dspine_drafter_fallback", "1 when a drafter pool serves without its drafter (fallen back), else 0.", TAGS
        )
        self.config_error = gauge("dspine_config_error", "1 when the engine's server refused its arguments.", TAGS)
        self.server_crashes = gauge(
            "dspine_server_crashes", "Server crashes (exits, start-up timeouts, hangs) since the replica started.", TAGS
        )

    def record(self, status: Any | None) -> None:
        """`status`: the engine's SupervisionStatus, or None for an engine without supervision."""
        fallback = bool(status is not None and status.drafter_fallback)
        config_error = bool(status is not None and status.state == "config_error")
        crashes = status.num_crashes if status is not None else 0
        self.drafter_fallback.set(1.0 if fallback else 0.0, tags=self._tags)
        self.config_error.set(1.0 if config_error else 0.0, tags=self._tags)
        self.server_crashes.set(float(crashes), tags=self._tags)
