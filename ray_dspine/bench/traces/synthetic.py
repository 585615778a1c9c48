"""Deterministic filler text for token-count traces (Mooncake, Azure).

Rule: `text(namespace, id)` is a fixed string of `BLOCK_TOKENS * CHARS_PER_TOKEN` = 512 * 4 = 2,048
characters drawn from a word list by `random.Random(f"{namespace}:{id}")`, so equal (namespace, id)
pairs give equal text on every run and machine, and requests that share Mooncake hash ids share their
prompt text (hence a server's prefix cache sees the sharing the trace recorded). A prompt of `n` tokens
over blocks `b_0..b_k` is `text(b_0) + ... + text(b_k)` cut to `n * CHARS_PER_TOKEN` characters.

Parameters: CHARS_PER_TOKEN = 4 (the usual English estimate; the word mix, with ~10% punctuation and ~8%
numbers, was tuned so SmolLM2-135M's tokenizer gives 508 tokens per block on average over 100 blocks,
range 460-575, i.e. 4.03 characters per token; other tokenizers differ, and the server's own
`usage.prompt_tokens` is what the records keep); BLOCK_TOKENS = 512 (Mooncake's block).
Complexity: O(n) characters per prompt; block texts are memoised (bounded LRU of 4,096 blocks, ~8 MB).
"""

from __future__ import annotations

import random
from functools import lru_cache

from .model import SyntheticPrompt

CHARS_PER_TOKEN = 4
BLOCK_TOKENS = 512
BLOCK_CHARS = BLOCK_TOKENS * CHARS_PER_TOKEN

_WORDS = (
    "the of and to in is for on that with as it by at from this be are or an was have not which you "
    "data model request server token cache block prefix query value result table index record field "
    "time user system memory queue batch stream output input layer weight graph node edge path route "
    "file line code test build error status config option number string list map set key call return "
    "flight hotel price order payment account email address city date week month year day hour minute "
    "update delete create read write load store send receive check parse render print share close open "
    "small large fast slow early late first last next previous new old high low good best simple clear "
    "because however therefore while when where which whose although unless until since before after"
).split()
_PUNCT = (".", ",", ";", ":", "?", "!")


def estimate_tokens(text: str) -> int:
    """ceil(len(text) / CHARS_PER_TOKEN); 0 for empty text."""
    return -(-len(text) // CHARS_PER_TOKEN)


@lru_cache(maxsize=4096)
def block_text(namespace: str, block_id: int) -> str:
    """The 2,048-character text block named by (namespace, block_id)."""
    rng = random.Random(f"{namespace}:{block_id}")
    parts: list[str] = []
    size = 0
    while size < BLOCK_CHARS:
        word = rng.choice(_WORDS)
        roll = rng.random()
        if roll < 0.10:
            word = f"{word}{rng.choice(_PUNCT)}"
        elif roll < 0.18:
            word = str(rng.randrange(10, 10_000))
        parts.append(word)
        size += len(word) + 1
    return (" ".join(parts) + " ")[:BLOCK_CHARS]


def render_synthetic(prompt: SyntheticPrompt) -> str:
    """Concatenate the blocks' texts and cut to `num_tokens * CHARS_PER_TOKEN` characters."""
    num_chars = prompt.num_tokens * CHARS_PER_TOKEN
    num_blocks = min(len(prompt.block_ids), -(-num_chars // BLOCK_CHARS))
    text = "".join(block_text(prompt.namespace, b) for b in prompt.block_ids[:num_blocks])
    return text[:num_chars]


def clamp_synthetic(prompt: SyntheticPrompt, max_prompt_tokens: int | None) -> SyntheticPrompt:
    """Keep the leading blocks that cover `min(num_tokens, max_prompt_tokens)` tokens (prefixes survive)."""
    if max_prompt_tokens is None or prompt.num_tokens <= max_prompt_tokens:
        return prompt
    num_blocks = -(-max_prompt_tokens // BLOCK_TOKENS)
    return SyntheticPrompt(
        namespace=prompt.namespace, block_ids=prompt.block_ids[:num_blocks], num_tokens=max_prompt_tokens
    )
