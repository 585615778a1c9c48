"""What causal attention costs a prefill: the pairs of (new token, earlier token of its prompt) it computes.

Rule `pairs`: u new tokens after c tokens of their prompt already in KV (cached, or prefilled in an
earlier pass) attend, token j (0-based in the prompt) the j tokens before it,
    pairs(c, u) = sum_{j=c}^{c+u-1} j = u * c + u * (u - 1) / 2
so passes over one prompt add up: pairs(c, a) + pairs(c + a, b) = pairs(c, a + b).
A profile or a pacing config prices a pair in ms (measured on an H200: docs/results/prefill-floor-h200.md).
Parameters: c >= 0, u >= 0 tokens.
Complexity: O(1).
"""

from __future__ import annotations


def attended_pairs(context_tokens: int, uncached_tokens: int) -> int:
    """pairs(c, u): what u tokens after c tokens of their prompt attend, summed over the u tokens."""
    return uncached_tokens * context_tokens + uncached_tokens * (uncached_tokens - 1) // 2
