"""Build the engine a pool's config names. Imports are deferred so a pool pays only for its engine.

A simulated engine with `prefill_pacing` set runs behind the engine wrapper registered as
"prefill_pacing" (engines/wrappers.py).
"""

from __future__ import annotations

from .protocol import Engine


def make_engine(config, pool_name: str = "pool") -> Engine:
    if config.kind == "embedded":
        from .embedded.engine import EmbeddedEngine

        return EmbeddedEngine(config)
    if config.kind == "simulated":
        from .simulated.engine import SimulatedEngine

        engine = SimulatedEngine(config)
        if config.prefill_pacing is None:
            return engine
        from .wrappers import wrap_engine

        return wrap_engine("prefill_pacing", engine, config.prefill_pacing)
    if config.kind == "sglang":
        from .sglang.engine import SGLangEngine

        return SGLangEngine(config, pool_name=pool_name)
    raise ValueError(f"unknown engine kind {config.kind!r}")
