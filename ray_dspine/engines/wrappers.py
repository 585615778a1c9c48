"""Engine wrappers: behaviour a pool's config asks for in front of its engine, provided by installed
packages through the entry point group `ray_dspine.engine_wrappers`.

Rule: wrap(name, engine, settings) = load(entry point `name` in group GROUP)(engine, settings), where
the loaded object is a callable (engine, settings) -> Engine; no entry point of that name -> a
ValueError that names the setting, the group and the fix. Entry points are read once per name.
Complexity: O(number of entry points in GROUP) on the first wrap of a name, O(1) after.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.metadata import entry_points

from pydantic import BaseModel

from .protocol import Engine

GROUP = "ray_dspine.engine_wrappers"

EngineWrapper = Callable[[Engine, BaseModel], Engine]


@cache
def load_wrapper(name: str) -> EngineWrapper:
    """The wrapper registered under `name` in GROUP (ValueError when none is)."""
    found = [point for point in entry_points(group=GROUP) if point.name == name]
    if not found:
        raise ValueError(
            f"{name} is set, but no installed package provides the engine wrapper {name!r} "
            f"(entry point group {GROUP!r}): install the package that registers it, or remove {name}"
        )
    return found[0].load()


def wrap_engine(name: str, engine: Engine, settings: BaseModel) -> Engine:
    """Rule `wrap`: the engine behind the wrapper the config's setting `name` asks for."""
    return load_wrapper(name)(engine, settings)
