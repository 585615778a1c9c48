"""The HiCache host tier of an SGLang replica, read off its launch arguments.

SGLang 0.5.23 (server_args.py; mem_cache HostKVCache.__init__): `--enable-hierarchical-cache` is off by
default; the host pool holds int(hicache_size * 1e9 // bytes per token) tokens when `--hicache-size`
(GB, default 0) is positive, else int(device pool tokens * hicache_ratio) (`--hicache-ratio`, default
2.0). Bytes per token are the device KV pool's, per GPU.

Rules (args = the engine's extra_args, the only place these flags can come from):
  H1  without --enable-hierarchical-cache in args: 0 host tokens.
  H2  `--flag value` and `--flag=value` both read; a flag given twice: the last wins (argparse).
  H3  host = int(G * 1e9 // kv_bytes_per_token) when G = --hicache-size > 0,
      else int(R * device_kv_tokens) with R = --hicache-ratio (2.0 when absent).
  H4  a value that is not a number, or negative: ValueError naming the flag (SGLang would not start).
Parameters: device_kv_tokens >= 0 tokens; kv_bytes_per_token >= 1 B.
Complexity: O(len(args)).
"""

from __future__ import annotations

from collections.abc import Sequence

ENABLE = "--enable-hierarchical-cache"
SIZE = "--hicache-size"
RATIO = "--hicache-ratio"
DEFAULT_RATIO = 2.0


def _last_value(args: Sequence[str], flag: str) -> str | None:
    value = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def _number(args: Sequence[str], flag: str, default: float) -> float:
    text = _last_value(args, flag)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"extra_args: {flag} takes a number, got {text!r}") from None
    if value < 0:
        raise ValueError(f"extra_args: {flag} must be >= 0, got {text!r}")
    return value


def enabled(args: Sequence[str]) -> bool:
    return ENABLE in args


def check_args(args: Sequence[str]) -> None:
    """Rule H4 without a device pool: raises ValueError for an unreadable size or ratio."""
    _number(args, SIZE, 0.0)
    _number(args, RATIO, DEFAULT_RATIO)


def host_kv_tokens(args: Sequence[str], device_kv_tokens: int, kv_bytes_per_token: int) -> int:
    """Rules H1-H3: the host tier's tokens."""
    if not enabled(args):
        return 0
    size_gb = _number(args, SIZE, 0.0)
    if size_gb > 0:
        return int(size_gb * 1e9 // kv_bytes_per_token)
    return int(_number(args, RATIO, DEFAULT_RATIO) * device_kv_tokens)
