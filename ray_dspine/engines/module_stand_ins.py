"""Inert stand-ins for packages SGLang imports at module level that cannot be installed on a CPU machine.

Rule: a top-level package in STAND_IN_MODULES that is not installed imports as an inert module (every
attribute is callable, subscriptable, usable as a decorator or a base class); an installed one is used as
it is. torchvision: PyPI has no CPU build matching torch 2.13.0, and SGLang imports its transforms for
vision processors; sgl_kernel: CUDA-only kernels. Nothing the CPU code paths run calls into them.
transformers decides which packages exist when it is first imported, so it is imported before the
finder is installed and never sees a stand-in. This module imports nothing heavy, so a process can
install the stand-ins before anything else (a prometheus_client multiprocess set-up, for one).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

STAND_IN_MODULES = frozenset({"torchvision", "sgl_kernel"})


class _Inert:
    """What a stand-in module hands out: callable, subscriptable, usable as a decorator or a base class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else _Inert()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()

    def __getitem__(self, key: Any) -> Any:
        return _Inert()

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (object,)


class _InertModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert()


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves `STAND_IN_MODULES` only where the real package is not installed."""

    def find_spec(self, fullname, path, target=None):
        root = fullname.split(".")[0]
        if root in STAND_IN_MODULES and importlib.machinery.PathFinder.find_spec(root) is None:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _InertModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        return None


def install_module_stand_ins() -> None:
    """Stand in for `STAND_IN_MODULES`; transformers decides what is installed first, so it sees none of them."""
    import transformers  # noqa: F401  (its availability checks run now, before the finder exists)
    import transformers.utils.import_utils  # noqa: F401

    if not any(isinstance(finder, _StandInFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _StandInFinder())
