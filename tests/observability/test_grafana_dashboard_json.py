"""The Grafana dashboard's structure: Grafana is not installable here, so its JSON is checked instead."""

import re

from dashboard_queries import REPO, data_panels, load_dashboard, panel_queries

REQUIRED_METRICS = {
    # Each brief item and the series that shows it.
    "ttft": "ray_dspine_ttft_s_bucket",
    "inter-token": "ray_dspine_itl_s_bucket",
    "end-to-end": "ray_dspine_e2e_s_bucket",
    "acceptance": "ray_dspine_accept_length",
    "kv headroom": "ray_dspine_kv_free_tokens",
    "mamba headroom": "ray_dspine_state_free_slots",
    "path": "ray_dspine_requests_total",
    "cost": "ray_dspine_replica_cost_usd_per_hour",
    "time in the replica before the first chunk": "ray_dspine_first_chunk_replica_s_bucket",
    "routing and transport before the first chunk": "ray_dspine_first_chunk_routing_s_bucket",
    "placements by outcome (turns moved off their replica)": "ray_dspine_routing_placements_total",
    "requests the router held": "ray_dspine_routing_holds_total",
    "routing decision time": "ray_dspine_routing_decision_s_bucket",
    "SGLang's acceptance length per replica": "ray_dspine_spec_accept_length",
    "SGLang's KV token usage per replica": "ray_dspine_kv_token_usage",
    "SGLang's Mamba usage per replica": "ray_dspine_mamba_usage",
}


def test_dashboard_identity_and_variables():
    dashboard = load_dashboard()
    assert dashboard["uid"] == "ray-dspine" and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    pool = variables["pool"]
    assert pool["type"] == "query" and pool["includeAll"] and pool["allValue"] == ".*"
    assert pool["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_panel_is_well_formed():
    dashboard = load_dashboard()
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert set(grid) == {"h", "w", "x", "y"} and 0 <= grid["x"] and grid["x"] + grid["w"] <= 24
    for panel in data_panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["description"] and panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert ref_ids and len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"].strip(), panel["title"]


def test_panels_do_not_overlap():
    cells = {}
    for panel in load_dashboard()["panels"]:
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_queries_use_only_known_variables_and_cover_the_brief():
    dashboard = load_dashboard()
    raw = " ".join(t["expr"] for p in data_panels(dashboard) for t in p["targets"])
    assert set(re.findall(r"\$\{?(\w+)", raw)) <= {"pool", "__rate_interval"}
    resolved = " ".join(expr for _, _, expr in panel_queries(dashboard))
    assert "$" not in resolved
    for item, metric in REQUIRED_METRICS.items():
        assert metric in resolved, f"no panel shows {item} ({metric})"
    for name in ("ray_dspine_ttft_s_bucket", "ray_dspine_itl_s_bucket", "ray_dspine_e2e_s_bucket"):
        for q in ("0.5", "0.95", "0.99"):
            assert f"histogram_quantile({q}, sum by (pool, le) (rate({name}" in resolved


def test_routing_panels_and_operations_guide_name_every_outcome_the_router_counts():
    from ray_dspine.routing.outcomes import HOLD_KINDS, PLACEMENT_OUTCOMES

    panels = {panel["title"]: panel for panel in data_panels(load_dashboard())}
    guide = (REPO / "docs" / "operations.md").read_text()
    for outcome in PLACEMENT_OUTCOMES:
        assert outcome in panels["Placements by outcome"]["description"] and f"`{outcome}`" in guide, outcome
    for kind in HOLD_KINDS:
        assert kind in panels["Requests held by the router"]["description"] and f"`{kind}`" in guide, kind


def test_engine_panels_show_each_replica():
    """SGLang's gauges differ per replica: each engine panel keeps the replica label Ray adds."""
    panels = {panel["title"]: panel for panel in data_panels(load_dashboard())}
    for title, metric in [("Speculative acceptance length per replica", "ray_dspine_spec_accept_length"),
                          ("KV-cache token usage per replica", "ray_dspine_kv_token_usage"),
                          ("Mamba-state usage per replica", "ray_dspine_mamba_usage")]:  # fmt: skip
        [target] = panels[title]["targets"]
        assert target["expr"] == f'max by (pool, replica) ({metric}{{pool=~"$pool"}})', title
        assert "{{replica}}" in target["legendFormat"], title
