"""Prefill backlog of an engine that counts its waiting requests but not their tokens.

SGLang's `/v1/loads` and `/metrics` report how many requests wait (`num_waiting_reqs`,
`sglang:num_queue_reqs`), not how much prompt they still have to prefill: a 100k-token prompt, seconds
of prefill on an H200, looks like a 100-token one. The router's predicted-TTFT scorer and TTFT guard
need the tokens. The replica sends every request and sees each one's first token, so it keeps the
figure itself (times in seconds from an injected clock):

  submit(q, t)   est(q) = P(q) * (1 - d(q) / n(q)): P = the request's estimated prompt tokens,
                 n = its prefix blocks, d = the leading run of them in this replica's block LRU
                 (n = 0: est = P). q is pending from t.
  first(q, t)    q leaves pending. Its blocks become the LRU's most recent (the engine now caches the
                 prompt it has just prefilled); beyond C blocks the least recently used are forgotten.
                 When est(q) >= min_sample_tokens, est(q) / (t - s(q)) is a rate sample, where
                 s(q) = max(submit time of q, the last first token before t) is when its prefill began.
  drop(q)        q leaves pending without touching the LRU (an error or a cancel before its first token).
  rate mu        the median of the last `rate_samples` samples; with none yet, `default_tokens_per_s`
                 (0: unknown).
  pending(t)     prefill runs in arrival order (SGLang's default fcfs policy, prefill before decode):
                 the oldest pending request q0 has max(0, est(q0) - mu * (t - s(q0))) left, the others
                 est each; pending(t) is their sum (tokens).
  C              (total KV tokens + HiCache host-tier tokens) / block_tokens, set from each load poll
                 (`resize`): blocks the host tier keeps are loaded, not prefilled.
  restart        `forget_cache` empties the block LRU (a relaunched server caches nothing); C is kept.
The median keeps one wrong cache guess (a prompt the engine had cached, est counted whole) from
setting the rate; only long prompts sample it, as a short one's time is mostly the step's fixed cost.
Parameters: block_tokens >= 1; min_sample_tokens >= 1; rate_samples >= 1;
default_tokens_per_s >= 0 (tokens/s).
Complexity: submit and first O(n(q) + evictions); pending O(P) over P pending requests; rate O(K log K).
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Callable, Sequence

from ..routing.prefix_index import PrefixIndex, uncached_share

_SELF = "self"


@dataclass(frozen=True, slots=True)
class _Pending:
    submitted_s: float
    est_tokens: int
    prefix_hashes: tuple[str, ...]


class PrefillBacklog:
    def __init__(
        self,
        clock: Callable[[], float],
        *,
        block_tokens: int = 512,
        min_sample_tokens: int = 8192,
        rate_samples: int = 33,
        default_tokens_per_s: float = 0.0,
    ):
        for name, value in (("block_tokens", block_tokens), ("min_sample_tokens", min_sample_tokens),
                            ("rate_samples", rate_samples)):  # fmt: skip
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if default_tokens_per_s < 0.0:
            raise ValueError(f"default_tokens_per_s must be >= 0, got {default_tokens_per_s}")
        self._clock = clock
        self._block_tokens = block_tokens
        self._min_sample_tokens = min_sample_tokens
        self._default_rate = default_tokens_per_s
        self._samples: deque[float] = deque(maxlen=rate_samples)
        self._blocks = PrefixIndex()
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._last_first_s = float("-inf")

    def resize(self, total_kv_tokens: int, host_kv_tokens: int = 0) -> None:
        """C = (total_kv_tokens + host_kv_tokens) / block_tokens (at least one block)."""
        self._blocks.resize(_SELF, max(1, (total_kv_tokens + host_kv_tokens) // self._block_tokens))

    @property
    def capacity_blocks(self) -> int | None:
        """C, or None before the first resize."""
        return self._blocks.capacity(_SELF)

    def forget_cache(self) -> None:
        """The server was relaunched: nothing it prefilled before is cached any more."""
        capacity = self._blocks.capacity(_SELF)
        self._blocks = PrefixIndex()
        if capacity is not None:
            self._blocks.resize(_SELF, capacity)

    def submit(self, request_id: str, prompt_tokens: int, prefix_hashes: Sequence[str]) -> int:
        """Start counting a request; returns est(q)."""
        hashes = tuple(prefix_hashes)
        depth = self._blocks.depths(hashes).get(_SELF, 0)
        est = uncached_share(prompt_tokens, len(hashes), depth)
        self._pending[request_id] = _Pending(self._clock(), est, hashes)
        return est

    def first(self, request_id: str) -> None:
        """The request's first token arrived: its prompt is prefilled and now cached."""
        entry = self._pending.pop(request_id, None)
        if entry is None:
            return
        now = self._clock()
        began = max(entry.submitted_s, self._last_first_s)
        if entry.est_tokens >= self._min_sample_tokens and now > began:
            self._samples.append(entry.est_tokens / (now - began))
        self._last_first_s = max(self._last_first_s, now)
        if entry.prefix_hashes:
            self._blocks.insert(entry.prefix_hashes, _SELF)

    def drop(self, request_id: str) -> None:
        """Stop counting a request that ended before its first token (no-op once it has one)."""
        self._pending.pop(request_id, None)

    def tokens_per_s(self) -> float:
        """mu: the median rate sample, else the default (0: unknown)."""
        return statistics.median(self._samples) if self._samples else self._default_rate

    def pending_tokens(self) -> int:
        """pending(now): uncached prompt tokens still to prefill, the running head's progress taken off."""
        if not self._pending:
            return 0
        head = next(iter(self._pending.values()))
        began = max(head.submitted_s, self._last_first_s)
        done = self.tokens_per_s() * max(0.0, self._clock() - began)
        rest = sum(entry.est_tokens for entry in self._pending.values()) - head.est_tokens
        return rest + max(0, round(head.est_tokens - done))

    @property
    def num_pending(self) -> int:
        return len(self._pending)
