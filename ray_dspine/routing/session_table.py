"""Router-side session table: session id -> the replica that last served it, bounded LRU.

    last(s)      = replica of the most recent placement of session s (None if unknown or evicted)
    record(s, r) : last(s) := r, and s becomes the most recently used; beyond `capacity` sessions the
                   least recently used is forgotten.

Parameters: capacity >= 1 sessions. Complexity: O(1) per lookup and record; remove_replica O(S).
"""

from __future__ import annotations

from collections import OrderedDict


class SessionTable:
    def __init__(self, capacity: int):
        self._capacity = capacity
        self._last: OrderedDict[str, str] = OrderedDict()

    def last(self, session_id: str | None) -> str | None:
        if not session_id:
            return None
        return self._last.get(session_id)

    def record(self, session_id: str | None, replica_id: str) -> None:
        if not session_id:
            return
        self._last[session_id] = replica_id
        self._last.move_to_end(session_id)
        while len(self._last) > self._capacity:
            self._last.popitem(last=False)

    def remove_replica(self, replica_id: str) -> None:
        for session_id in [s for s, r in self._last.items() if r == replica_id]:
            del self._last[session_id]

    def __len__(self) -> int:
        return len(self._last)
