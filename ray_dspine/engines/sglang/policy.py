"""What the supervisor does after the SGLang server crashes: restart, fall back, give up.

What counts as a crash (process.py S5): an exit nobody asked for, a start-up timeout (no /health 200
within startup_timeout_s), a hang (consecutive /health_generate misses) and a drafter probe without an
answer. Never recorded: a config error (the supervisor stops instead of restarting the same arguments),
a drafter probe that answered without speculation (an immediate fallback), an operator's drafter switch.

Rules (t = now; crashes older than t - crash_window_s are forgotten):
  n         crashes in the window, this one included; d = those that happened with the drafter on.
  give up   n > max_restarts: the replica reports unhealthy and Ray replaces it.
  fallback  the drafter was on and d >= fallback_after_crashes: relaunch without drafter flags
            (path "autoregressive-fallback") until the operator switches the drafter back on.
  restart   otherwise relaunch with the same drafter setting.
  delay     min(backoff_max_s, backoff_s * 2**(n - 1)) before the relaunch.
Parameters: max_restarts >= 0, crash_window_s > 0 s, fallback_after_crashes >= 1, 0 <= backoff_s <= backoff_max_s.
Complexity: O(crashes in the window) per crash.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Literal

Action = Literal["restart", "fallback", "give_up"]


@dataclass(frozen=True)
class CrashVerdict:
    action: Action
    delay_s: float
    drafter: bool
    num_crashes: int
    num_drafter_crashes: int


class CrashPolicy:
    def __init__(
        self,
        *,
        max_restarts: int,
        crash_window_s: float,
        fallback_after_crashes: int,
        backoff_s: float,
        backoff_max_s: float,
    ):
        self.max_restarts = max_restarts
        self.crash_window_s = crash_window_s
        self.fallback_after_crashes = fallback_after_crashes
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self._crashes: deque[tuple[float, bool]] = deque()

    def reset(self) -> None:
        """Forget past crashes (an operator switched the drafter back on)."""
        self._crashes.clear()

    def record(self, now_s: float, drafter_on: bool) -> CrashVerdict:
        self._crashes.append((now_s, drafter_on))
        while self._crashes and self._crashes[0][0] < now_s - self.crash_window_s:
            self._crashes.popleft()
        n = len(self._crashes)
        d = sum(1 for _, with_drafter in self._crashes if with_drafter)
        delay = min(self.backoff_max_s, self.backoff_s * 2 ** (n - 1))
        if n > self.max_restarts:
            return CrashVerdict("give_up", 0.0, drafter_on, n, d)
        if drafter_on and d >= self.fallback_after_crashes:
            return CrashVerdict("fallback", delay, False, n, d)
        return CrashVerdict("restart", delay, drafter_on, n, d)
