"""Read a Serve YAML and validate each application's `args:` into `AppConfig`, with readable errors."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from .config import AppConfig


class ConfigFileError(ValueError):
    """A config file that cannot be used; the message names the file, the field and the fix."""


def _location(prefix: str, loc: tuple) -> str:
    text = prefix
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def format_validation_error(exc: ValidationError, prefix: str) -> str:
    lines = []
    for error in exc.errors():
        lines.append(f"  {_location(prefix, error['loc'])}: {error['msg']}")
    return "\n".join(lines)


def read_serve_yaml(path: str | Path) -> dict:
    path = Path(path)
    if path.is_dir():
        raise ConfigFileError(f"{path}: a folder, not a file; give a Serve YAML such as clusters/local.yaml")
    if not path.is_file():
        raise ConfigFileError(f"{path}: no such file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path}: not UTF-8 text (byte {exc.start}); give a Serve YAML file") from exc
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("applications"), list):
        raise ConfigFileError(f"{path}: expected a Serve config with an `applications:` list")
    return data


def load_app_configs(path: str | Path) -> list[tuple[str, AppConfig]]:
    """Every application of ours in the file (those whose import_path is our builder)."""
    data = read_serve_yaml(path)
    found = []
    for index, app in enumerate(data["applications"]):
        if not str(app.get("import_path", "")).startswith("ray_dspine."):
            continue
        prefix = f"applications[{index}].args"
        try:
            found.append((app.get("name", f"app{index}"), AppConfig.model_validate(app.get("args") or {})))
        except ValidationError as exc:
            raise ConfigFileError(f"{path}: invalid configuration:\n{format_validation_error(exc, prefix)}") from exc
    if not found:
        raise ConfigFileError(f"{path}: no application uses ray_dspine.serve.app:build_app")
    return found
