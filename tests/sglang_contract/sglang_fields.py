"""Which keys of a JSON body SGLang's pydantic request classes would drop without a word.

SGLang 0.5.23's request classes (`sglang.srt.entrypoints.openai.protocol`) do not forbid extra keys, so an
unknown key validates and is then gone. `unknown_keys(model_class, body)` validates `body` with the class and
walks body and model together: at every level where the value became a pydantic model, each key of the dict
must be one of that model's fields (by name or alias); lists are walked item by item. Values that stay plain
dicts (logit_bias, chat_template_kwargs, a JSON schema) are free-form and not walked.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def _declared(model: BaseModel) -> set[str]:
    names = set()
    for name, info in type(model).model_fields.items():
        names.add(name)
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str):
                names.add(alias)
    return names


def _walk(model: Any, data: Any, path: str, found: list[str]) -> None:
    if isinstance(model, BaseModel) and isinstance(data, dict):
        declared = _declared(model)
        for key, value in data.items():
            if key not in declared:
                found.append(f"{path}{key}")
                continue
            field = next((name for name, info in type(model).model_fields.items()
                          if key in (name, info.alias, info.validation_alias)), key)  # fmt: skip
            _walk(getattr(model, field, None), value, f"{path}{key}.", found)
    elif isinstance(model, (list, tuple)) and isinstance(data, list):
        for index, (item, value) in enumerate(zip(model, data)):
            _walk(item, value, f"{path}{index}.", found)


def unknown_keys(model_class: type[BaseModel], body: dict[str, Any]) -> list[str]:
    """Dotted paths of the keys in `body` that `model_class` (SGLang's) would silently drop."""
    found: list[str] = []
    _walk(model_class.model_validate(body), body, "", found)
    return found
