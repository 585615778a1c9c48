"""The HiCache host tier of an SGLang replica, read off its launch arguments.

SGLang 0.5.23 (server_args.py; mem_cache HostKVCache.__init__, hybrid_pool_assembler.py):
`--enable-hierarchical-cache` is off by default; the KV host pool holds int(size_gb * 1e9 // bytes per
token) tokens when `--hicache-size` (GB, default 0) is positive, else int(device pool tokens *
hicache_ratio) (`--hicache-ratio`, default 2.0). On a hybrid Mamba model the size is first split
between the KV and the Mamba host pools in proportion to their device pools' bytes
(`_split_hicache_size`); the ratio applies to each pool alone. Bytes are per GPU.

Rules (args = the engine's extra_args, the only place these flags can come from; K = device_kv_tokens *
kv_bytes_per_token, M = mamba_pool_bytes, both of the device):
  H1  without --enable-hierarchical-cache in args: 0 host tokens.
  H2  `--flag value` and `--flag=value` both read; a flag given twice: the last wins (argparse).
  H3  when G = --hicache-size > 0: host = int(G * K / (K + M) * 1e9 // kv_bytes_per_token)
      (M = 0 without a Mamba pool: all of G); else int(R * device_kv_tokens), R = --hicache-ratio (2.0
      when absent).
  H4  a value that is not a number, or negative: ValueError naming the flag (SGLang would not start).
  H5  host memory per GPU: with G, G * 1e9 B in all (K / (K + M) of it for KV, the rest for Mamba);
      with R, R * K for KV and R * M for Mamba. A drafter's own KV host pool, where SGLang keeps one,
      comes on top.
Parameters: device_kv_tokens >= 0 tokens; kv_bytes_per_token >= 1 B; mamba_pool_bytes >= 0 B.
Complexity: O(len(args)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...capacity import CapacityPlan

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


@dataclass(frozen=True)
class HostTier:
    kv_tokens: int
    kv_bytes: int  # per GPU
    mamba_bytes: int  # per GPU


def host_tier(
    args: Sequence[str], device_kv_tokens: int, kv_bytes_per_token: int, mamba_pool_bytes: int = 0
) -> HostTier | None:
    """Rules H1-H5: the host pools the arguments give, or None without HiCache."""
    if not enabled(args):
        return None
    kv_device = device_kv_tokens * kv_bytes_per_token
    size_gb = _number(args, SIZE, 0.0)
    if size_gb > 0:
        share = kv_device / (kv_device + mamba_pool_bytes) if kv_device + mamba_pool_bytes > 0 else 1.0
        kv_bytes = size_gb * share * 1e9
        return HostTier(int(kv_bytes // kv_bytes_per_token), int(kv_bytes), int(size_gb * 1e9 - kv_bytes))
    ratio = _number(args, RATIO, DEFAULT_RATIO)
    return HostTier(int(ratio * device_kv_tokens), int(ratio * kv_device), int(ratio * mamba_pool_bytes))


def host_kv_tokens(
    args: Sequence[str], device_kv_tokens: int, kv_bytes_per_token: int, mamba_pool_bytes: int = 0
) -> int:
    """Rules H1-H3: the KV host pool's tokens (0 without HiCache)."""
    tier = host_tier(args, device_kv_tokens, kv_bytes_per_token, mamba_pool_bytes)
    return 0 if tier is None else tier.kv_tokens


def plan_host_tier(args: Sequence[str], plan: CapacityPlan, device_kv_tokens: int | None = None) -> HostTier | None:
    """host_tier on a capacity plan: its KV bytes per token and its Mamba pool (max_mamba_cache_size x
    mamba_state_bytes_per_request); device_kv_tokens defaults to the plan's free_kv_tokens."""
    return host_tier(
        args,
        plan.free_kv_tokens if device_kv_tokens is None else device_kv_tokens,
        max(1, plan.target_kv_bytes_per_token),
        plan.max_mamba_cache_size * plan.mamba_state_bytes_per_request,
    )
