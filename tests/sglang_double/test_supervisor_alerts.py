"""observability/alerts.yml fires on the supervision gauges as stated: `promtool test rules` on synthetic series.

Series are as Prometheus stores Ray's export of the gauges (`ray_` prefix, Ray's replica tag). Installs
Debian's `prometheus` package (for promtool) when it is missing, as tests/observability does.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "observability" / "alerts.yml"
PROMETHEUS_CONFIG = REPO / "observability" / "prometheus.yml"


def promtool() -> str:
    spec = importlib.util.spec_from_file_location(
        "prometheus_package", REPO / "tests" / "observability" / "prometheus_package.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.prometheus_tool("promtool")


def description(alert: str) -> str:
    rules = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]
    return next(rule["annotations"]["description"] for rule in rules if rule["alert"] == alert)


def expected(alert: str, labels: dict, summary: str) -> dict:
    return {"exp_labels": labels, "exp_annotations": {"summary": summary, "description": description(alert)}}


UNIT_TESTS = {
    "rule_files": [str(ALERTS)],
    "evaluation_interval": "1m",
    "tests": [
        {
            "interval": "1m",
            "input_series": [
                # spec-a falls back at minute 2 and stays; spec-b never does; spec-c is back after one minute
                {"series": 'ray_dspine_drafter_fallback{pool="spec", replica="spec-a", deployment="pool-spec"}',
                 "values": "0 0 1 1 1 1"},
                {"series": 'ray_dspine_drafter_fallback{pool="spec", replica="spec-b", deployment="pool-spec"}',
                 "values": "0 0 0 0 0 0"},
                {"series": 'ray_dspine_drafter_fallback{pool="spec", replica="spec-c", deployment="pool-spec"}',
                 "values": "0 0 1 0 0 0"},
                # ar-a refuses its arguments from minute 1
                {"series": 'ray_dspine_config_error{pool="ar", replica="ar-a", deployment="pool-ar"}',
                 "values": "0 1 1 1 1 1"},
                # crashes since start: ar-b crashes 3 times within minutes 1-3; spec-a once
                {"series": 'ray_dspine_server_crashes{pool="ar", replica="ar-b", deployment="pool-ar"}',
                 "values": "0 1 2 3 3 3"},
                {"series": 'ray_dspine_server_crashes{pool="spec", replica="spec-a", deployment="pool-spec"}',
                 "values": "0 0 1 1 1 1"},
            ],
            "alert_rule_test": [
                # for: 1m -> pending at minute 2, firing from minute 3, for spec-a only (spec-c recovered)
                {"eval_time": "2m", "alertname": "DspineDrafterFallback", "exp_alerts": []},
                {"eval_time": "4m", "alertname": "DspineDrafterFallback", "exp_alerts": [
                    expected("DspineDrafterFallback", {"pool": "spec", "replica": "spec-a", "severity": "warning"},
                             "Pool spec replica spec-a serves without its drafter")]},
                # for: 0m -> firing from minute 1
                {"eval_time": "0m", "alertname": "DspineSGLangConfigError", "exp_alerts": []},
                {"eval_time": "1m", "alertname": "DspineSGLangConfigError", "exp_alerts": [
                    expected("DspineSGLangConfigError", {"pool": "ar", "replica": "ar-a", "severity": "critical"},
                             "Pool ar replica ar-a: SGLang refused its arguments")]},
                # max - min over 15 min >= 3: ar-b at minute 3 (3 - 0), never spec-a (1 - 0)
                {"eval_time": "2m", "alertname": "DspineSGLangCrashLoop", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "DspineSGLangCrashLoop", "exp_alerts": [
                    expected("DspineSGLangCrashLoop", {"pool": "ar", "replica": "ar-b", "severity": "warning"},
                             "Pool ar replica ar-b: 3 SGLang crashes in 15 min")]},
            ],
        }
    ],
}


def test_prometheus_config_loads_the_alert_rules():
    assert yaml.safe_load(PROMETHEUS_CONFIG.read_text())["rule_files"] == ["alerts.yml"]  # next to the config
    result = subprocess.run([promtool(), "check", "config", str(PROMETHEUS_CONFIG)], capture_output=True, text=True)
    assert result.returncode == 0 and "1 rule files found" in result.stdout, result.stdout + result.stderr


def test_alerts_fire_on_the_supervision_gauges(tmp_path):
    tests = tmp_path / "alerts_test.yml"
    tests.write_text(yaml.safe_dump(UNIT_TESTS))
    result = subprocess.run([promtool(), "test", "rules", str(tests)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    names = [rule["alert"] for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]
    assert names == ["DspineDrafterFallback", "DspineSGLangConfigError", "DspineSGLangCrashLoop"]
