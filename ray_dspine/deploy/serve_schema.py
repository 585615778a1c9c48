"""Ray Serve's own view of a config file: `ServeDeploySchema`, plus the typos Ray lets through.

Rules:
  R1 schema     ServeDeploySchema.model_validate(document) passes; each pydantic error is one finding at
                its field path.
  R2 keys       a key unknown to Ray is an error at the top level (ServeDeploySchema fields), in each
                application (ServeApplicationSchema), in each deployment override (DeploymentSchema) and
                in its autoscaling_config (AutoscalingConfig): Ray's models ignore unknown keys, so a
                misspelt option would silently do nothing.
  R3 autoscale  each override's autoscaling_config builds Ray's AutoscalingConfig, which checks bounds
                (min_replicas <= initial_replicas <= max_replicas) and imports policy.policy_function.
Imports ray lazily (only `ray-dspine check` needs it). Complexity: O(applications * deployments).
"""

from __future__ import annotations

from .findings import Finding, validation_findings


def _unknown_keys(data: object, known: set[str], path: str, what: str) -> list[Finding]:
    if not isinstance(data, dict):
        return []
    unknown = sorted(str(key) for key in data if key not in known)
    return [
        Finding("error", f"{path}.{key}" if path else key, f"Ray Serve has no {what} option {key!r}",
                f"remove it or correct its spelling (known: {', '.join(sorted(known))})")
        for key in unknown
    ]  # fmt: skip


def _known(model) -> set[str]:
    names = set(model.model_fields)
    names.update(field.alias for field in model.model_fields.values() if field.alias)
    return names


def ray_schema_findings(document: dict) -> list[Finding]:
    """Findings from Ray's schema (R1), unknown keys (R2) and autoscaling configs (R3)."""
    from pydantic import ValidationError
    from ray.serve.config import AutoscalingConfig
    from ray.serve.schema import DeploymentSchema, ServeApplicationSchema, ServeDeploySchema

    found = _unknown_keys(document, _known(ServeDeploySchema), "", "top-level")
    try:
        ServeDeploySchema.model_validate(document)
    except ValidationError as exc:
        found += validation_findings(exc, "")
    applications = document.get("applications")
    if not isinstance(applications, list):
        return found
    for app_index, app in enumerate(applications):
        app_path = f"applications[{app_index}]"
        found += _unknown_keys(app, _known(ServeApplicationSchema), app_path, "application")
        overrides = app.get("deployments") if isinstance(app, dict) else None
        for index, override in enumerate(overrides if isinstance(overrides, list) else []):
            path = f"{app_path}.deployments[{index}]"
            found += _unknown_keys(override, _known(DeploymentSchema), path, "deployment")
            autoscaling = override.get("autoscaling_config") if isinstance(override, dict) else None
            if not isinstance(autoscaling, dict):
                continue
            found += _unknown_keys(autoscaling, _known(AutoscalingConfig), f"{path}.autoscaling_config",
                                   "autoscaling_config")  # fmt: skip
            try:
                AutoscalingConfig(**autoscaling)
            except ValidationError as exc:
                found += validation_findings(exc, f"{path}.autoscaling_config")
            except (ImportError, AttributeError, ValueError, TypeError) as exc:
                found.append(
                    Finding("error", f"{path}.autoscaling_config.policy.policy_function", f"cannot load it: {exc}",
                            "name an importable `module:Class` (installed in the image), e.g. "
                            "ray_dspine.autoscale.ray_policy:CostAutoscalingPolicy")
                )  # fmt: skip
    return found
