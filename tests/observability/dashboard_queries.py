"""The PromQL of observability/grafana/ray-dspine.json, with Grafana's variables replaced for Prometheus."""

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "observability" / "grafana" / "ray-dspine.json"
PROMETHEUS_CONFIG = REPO / "observability" / "prometheus.yml"

# What Grafana would put in place of each variable when every pool is selected.
SUBSTITUTIONS = {"$__rate_interval": "1m", "$pool": ".*"}


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def data_panels(dashboard: dict) -> list[dict]:
    """Panels that query (rows excluded)."""
    return [panel for panel in dashboard["panels"] if panel["type"] != "row"]


def resolve(expr: str) -> str:
    for variable, value in SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    return expr


def panel_queries(dashboard: dict) -> list[tuple[str, str, str]]:
    """(panel title, refId, PromQL ready for Prometheus) for every target of every data panel."""
    return [
        (panel["title"], target["refId"], resolve(target["expr"]))
        for panel in data_panels(dashboard)
        for target in panel["targets"]
    ]
