"""Prefix block cache: finished requests' KV kept by token blocks, reused by later prompts.

A radix tree whose edges are blocks of B tokens (B = prefix_block_tokens): the node for block i
stands for the whole token prefix t[0 .. (i+1)B), so a block's KV is only usable after its ancestors'.
Every block also holds an opaque payload (its KV tensors; this module never looks inside).

Rules (all counts in tokens; K = kv_budget_tokens, R = reserved tokens, C = B * number of blocks):
  match:   match(t, n) = the longest leading run of full blocks of t present in the tree, at most
           n blocks (the caller passes n = floor((len(t) - 1) / B): one prompt token is always
           prefilled, to produce the first token). Matching does not pin or touch.
  insert:  extend(path, t) walks on from a request's pinned path over the full blocks of t; a block
           already present (another request cached the same prefix) is shared, a missing one is
           created with its payload. Either way the request pins it (ref + 1). A new block moves B
           tokens from the request's reservation into C (`take_reserved`: R - B, C + B), so
           inserting never needs memory the request did not hold.
  pin:     ref(b) = requests holding b; a block with ref >= 1 is never evicted. A request pins its
           whole path (root to its deepest block), so ref(parent) >= ref(child).
  unpin:   releases a path deepest-first and appends each block reaching ref 0 to the LRU list, so a
           parent is always more recent than its children.
  evict:   to free T tokens, drop ref-0 blocks least recently released first until >= T are freed or
           none is left. With the two rules above the least recent ref-0 block is always a leaf:
           a child is released before its parent on every path, and a pinned child pins its parent.
  budget:  R + C <= K at all times. free = K - R - C; available = free + evictable (B * ref-0 blocks).
           reserve(n) succeeds iff available >= n, evicting only what free lacks.
Parameters: B in [1, 4096] tokens; K >= B tokens.
Complexity: match/extend/unpin O(blocks of t); evict O(blocks evicted); reserve O(blocks evicted).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Sequence


class Block:
    __slots__ = ("key", "parent", "children", "payload", "ref_count", "index")

    def __init__(self, key: tuple[int, ...], parent: "Block | None", payload: object, index: int):
        self.key = key
        self.parent = parent
        self.children: dict[tuple[int, ...], Block] = {}
        self.payload = payload
        self.ref_count = 0
        self.index = index  # block position in the prompt: covers tokens [index * B, (index + 1) * B)


class BlockCache:
    def __init__(self, block_tokens: int, budget_tokens: int):
        if not 1 <= block_tokens <= 4096 or budget_tokens < block_tokens:
            raise ValueError(f"need 1 <= block_tokens <= 4096 and budget >= block_tokens, got {block_tokens}, {budget_tokens}")
        self.block_tokens = block_tokens
        self.budget_tokens = budget_tokens
        self.reserved_tokens = 0
        self.num_evicted_blocks = 0
        self._root = Block((), None, None, -1)
        self._num_blocks = 0
        self._lru: OrderedDict[Block, None] = OrderedDict()  # ref-0 blocks, least recently released first

    # -- accounting ---------------------------------------------------------------------------
    @property
    def cached_tokens(self) -> int:
        return self._num_blocks * self.block_tokens

    @property
    def evictable_tokens(self) -> int:
        return len(self._lru) * self.block_tokens

    @property
    def free_tokens(self) -> int:
        return self.budget_tokens - self.reserved_tokens - self.cached_tokens

    @property
    def available_tokens(self) -> int:
        return self.free_tokens + self.evictable_tokens

    def available_if_pinned(self, path: Sequence[Block]) -> int:
        """Available tokens once `path` is pinned (its ref-0 blocks stop being evictable)."""
        return self.available_tokens - self.block_tokens * sum(1 for b in path if b.ref_count == 0)

    # -- rules --------------------------------------------------------------------------------
    def match(self, tokens: Sequence[int], max_blocks: int) -> list[Block]:
        B, node, path = self.block_tokens, self._root, []
        for i in range(min(max_blocks, len(tokens) // B)):
            node = node.children.get(tuple(tokens[i * B : (i + 1) * B]))
            if node is None:
                break
            path.append(node)
        return path

    def pin(self, path: Sequence[Block]) -> None:
        for block in path:
            if block.ref_count == 0:
                self._lru.pop(block, None)
            block.ref_count += 1

    def unpin(self, path: Sequence[Block]) -> None:
        for block in reversed(path):
            block.ref_count -= 1
            if block.ref_count == 0:
                self._lru[block] = None  # deepest first: the parent lands after (more recent than) the child

    def reserve(self, num_tokens: int) -> bool:
        if num_tokens > self.available_tokens:
            return False
        missing = num_tokens - self.free_tokens
        if missing > 0:
            self.evict(missing)
        self.reserved_tokens += num_tokens
        return True

    def release(self, num_tokens: int) -> None:
        self.reserved_tokens -= num_tokens

    def extend(
        self, path: list[Block], tokens: Sequence[int], make_payload: Callable[[int], object], reserved: int
    ) -> tuple[list[Block], int]:
        """Pin the full blocks of `tokens` after `path`; returns (new path, reservation left).

        `reserved` is the request's reservation; each new block takes B tokens of it (rule `insert`).
        A new block is only created while the reservation covers it."""
        B = self.block_tokens
        node = path[-1] if path else self._root
        path = list(path)
        for i in range(len(path), len(tokens) // B):
            key = tuple(tokens[i * B : (i + 1) * B])
            child = node.children.get(key)
            if child is None:
                if reserved < B:
                    break
                child = Block(key, node, make_payload(i), i)
                node.children[key] = child
                self._num_blocks += 1
                reserved -= B
                self.reserved_tokens -= B
            self.pin([child])
            path.append(child)
            node = child
        return path, reserved

    def evict(self, num_tokens: int) -> int:
        freed = 0
        while freed < num_tokens and self._lru:
            block, _ = self._lru.popitem(last=False)
            assert not block.children, "LRU order evicts leaves first"
            del block.parent.children[block.key]
            block.payload = None
            self._num_blocks -= 1
            self.num_evicted_blocks += 1
            freed += self.block_tokens
        return freed

    def clear(self) -> None:
        """Drop every block (pins included); reservations stay."""
        self._root = Block((), None, None, -1)
        self._num_blocks = 0
        self._lru.clear()
