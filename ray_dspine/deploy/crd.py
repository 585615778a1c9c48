"""Check a manifest offline against a CustomResourceDefinition, as strictly as an API server would.

Rules (schema = spec.versions[name=version].schema.openAPIV3Schema of the CRD):
  strip     every `x-kubernetes-*` key is dropped; a node that had `x-kubernetes-int-or-string: true`
            accepts an integer or a string (type ["integer", "string"]).
  closed    every object schema that lists `properties` and sets no `additionalProperties` gets
            `additionalProperties: false`: the API server prunes unknown fields silently, which would
            hide a misspelt field, so here an unknown field is an error.
  validate  jsonschema's Draft7Validator; each error is reported as "<json path>: <message>".
No API server is needed. `jsonschema` is imported lazily (a test dependency).
Complexity: O(schema size) to prepare, O(manifest size x schema depth) to validate.
"""

from __future__ import annotations

from pathlib import Path

import yaml


def strict_schema(node):
    """A copy of an OpenAPI v3 schema node with the rules `strip` and `closed` applied."""
    if isinstance(node, list):
        return [strict_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: strict_schema(value) for key, value in node.items() if not str(key).startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["type"] = ["integer", "string"]
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def load_crd_schema(crd_path: str | Path, version: str = "v1") -> dict:
    crd = yaml.safe_load(Path(crd_path).read_text(encoding="utf-8"))
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return strict_schema(entry["schema"]["openAPIV3Schema"])
    raise KeyError(f"{crd_path} has no version {version!r}")


def manifest_errors(manifest: dict, schema: dict) -> list[str]:
    """Every schema violation of `manifest`, as "<path>: <message>"; empty when it conforms."""
    from jsonschema import Draft7Validator

    validator = Draft7Validator(schema)
    errors = sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, error.absolute_path)) or '<root>'}: {error.message}" for error in errors]
