"""The serving core stands apart from the lab: nothing under ray_dspine/ imports dspine_lab.

Rules:
  imports   with dspine_lab made unimportable (a meta path finder that refuses it and anything under
            it), every module pkgutil.walk_packages finds under ray_dspine imports without error
  names     no file under ray_dspine/ holds the string "dspine_lab" (not even a module name handed to
            importlib, or a command line in a comment)
The lab reaches the core only through entry points the core reads by group (pyproject.toml).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = REPO / "ray_dspine"
LAB = "dspine_lab"

# Run in a fresh interpreter: a module the test process already imported would not be imported again.
IMPORT_EVERY_MODULE = textwrap.dedent(
    """
    import importlib, importlib.abc, json, pkgutil, sys, traceback

    class RefuseLab(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "dspine_lab" or name.startswith("dspine_lab."):
                raise ModuleNotFoundError(f"No module named {name!r} (refused)", name=name)
            return None

    sys.meta_path.insert(0, RefuseLab())
    for name in [n for n in sys.modules if n == "dspine_lab" or n.startswith("dspine_lab.")]:
        del sys.modules[name]

    import ray_dspine

    names, failed = [], {}

    def note(name):
        failed[name] = traceback.format_exc(limit=3)

    for info in pkgutil.walk_packages(ray_dspine.__path__, "ray_dspine.", onerror=note):
        names.append(info.name)
        try:
            importlib.import_module(info.name)
        except BaseException:
            note(info.name)
    print(json.dumps({"names": names, "failed": failed}))
    """
)


def _import_core_without_lab() -> dict:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EVERY_MODULE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_core_module_imports_without_the_lab():
    result = _import_core_without_lab()
    # A walk that found next to nothing would pass vacuously: the core has well over 100 modules
    # (engines, routing, serve, capacity, deploy, bench, autoscale...), these among them.
    assert len(result["names"]) > 100
    for name in ("ray_dspine.engines.factory", "ray_dspine.routing.pipeline", "ray_dspine.cli"):
        assert name in result["names"]
    assert result["failed"] == {}, "\n".join(f"{name}:\n{trace}" for name, trace in result["failed"].items())


def test_no_core_file_names_the_lab():
    naming = sorted(
        str(path.relative_to(REPO))
        for path in CORE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and LAB.encode() in path.read_bytes()
    )
    assert naming == []


# The extension points the lab fills (ray_dspine/cli.py, ray_dspine/engines/wrappers.py).


def _subcommands(parser, *path: str) -> list[str]:
    """The names of the subcommands under `path` (e.g. "bench") of an argparse parser."""
    for name in path:
        action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        parser = action.choices[name]
    action = next((a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"), None)
    return list(action.choices) if action else []


def test_cli_takes_the_lab_commands_from_entry_points(monkeypatch):
    from ray_dspine import cli

    # With this repository installed: the core's own bench commands, then what the "bench.lab"
    # entry point registers (pyproject.toml), in that order; tune exists only through "tune.lab".
    assert _subcommands(cli.build_parser(), "bench") == [
        "engine", "replay", "equivalence", "ab-report", "routing", "routing-memory", "autoscaling"
    ]  # fmt: skip
    assert _subcommands(cli.build_parser(), "tune") == ["autoscaling"]
    # No entry points: the core alone, and no tune group at all.
    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    parser = cli.build_parser()
    assert _subcommands(parser, "bench") == ["engine", "replay", "equivalence", "ab-report"]
    assert "tune" not in _subcommands(parser)


def test_cli_skips_an_entry_point_whose_package_is_not_installed(monkeypatch):
    from importlib.metadata import EntryPoint

    from ray_dspine import cli

    missing = EntryPoint(name="bench.gone", value="package_not_installed_here.cli:register", group=cli.COMMAND_GROUP)
    monkeypatch.setattr(cli, "entry_points", lambda group: [missing])
    assert _subcommands(cli.build_parser(), "bench") == ["engine", "replay", "equivalence", "ab-report"]


def test_prefill_pacing_runs_behind_the_registered_wrapper():
    from ray_dspine.engines.factory import make_engine
    from ray_dspine.engines.prefill_pacing_config import PrefillPacingConfig
    from ray_dspine.engines.simulated import SimulatedEngine, SimulatedEngineConfig
    from ray_dspine.engines.wrappers import GROUP

    plain = SimulatedEngineConfig(drafter="none", total_kv_tokens=200_000, num_state_slots=16)
    assert type(make_engine(plain)) is SimulatedEngine
    paced = make_engine(plain.model_copy(update={"prefill_pacing": PrefillPacingConfig(min_uncached_tokens=80_000)}))
    # Whatever the group names "prefill_pacing" wraps the simulated engine; here that is the lab's
    # PacedEngine (pyproject.toml), found by name without the core naming its package.
    from importlib.metadata import entry_points

    (point,) = [p for p in entry_points(group=GROUP) if p.name == "prefill_pacing"]
    assert type(paced) is point.load()
    assert type(paced.engine) is SimulatedEngine


def test_a_wrapper_no_package_provides_is_a_named_error(monkeypatch):
    import pytest

    from ray_dspine.engines import wrappers

    wrappers.load_wrapper.cache_clear()
    monkeypatch.setattr(wrappers, "entry_points", lambda group: [])
    try:
        named = r"prefill_pacing is set.*'ray_dspine.engine_wrappers'.*remove prefill_pacing"
        with pytest.raises(ValueError, match=named):
            wrappers.wrap_engine("prefill_pacing", object(), None)
    finally:
        wrappers.load_wrapper.cache_clear()
