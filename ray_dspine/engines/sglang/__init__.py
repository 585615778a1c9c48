"""The production GPU engine: a supervised SGLang 0.5.x server per replica (DSpine plugin or built-in DFLASH)."""

from .args import DRAFTER_FLAGS, flags_of, render_command, without_flags
from .config import SGLangEngineConfig
from .engine import SGLangEngine
from .policy import CrashPolicy, CrashVerdict
from .process import ServerSupervisor, launch_subprocess, pick_port

__all__ = [
    "DRAFTER_FLAGS",
    "CrashPolicy",
    "CrashVerdict",
    "SGLangEngine",
    "SGLangEngineConfig",
    "ServerSupervisor",
    "flags_of",
    "launch_subprocess",
    "pick_port",
    "render_command",
    "without_flags",
]
