"""Pacing permits: which long prompts a pacing replica may pace, judged on the pool's recent traffic.

A replica that paces a long uncached prompt (the "prefill_pacing" engine wrapper, engines/wrappers.py)
lets shorter requests start between its pieces, and the prompt's own TTFT grows by up to its yield
budget. That lowers the pool's p99 TTFT only while long prompts are rarer than the requests above the
p99 (1% of them): then the prompts it delays sit above the p99 anyway, and the requests it lets ahead
would otherwise have waited seconds. Once long prompts are that common, the p99 lands on one of them
and every delay a paced prompt accepts adds to it. A replica sees a quarter of a four-replica pool's
traffic and, in a few hundred requests, one or two long prompts, too few to tell the two cases apart;
the router sees every placement, so it keeps the share and hands each request a permit
(`GenerateRequest.pace`).

Rules (s* = max_long_share, W = window_requests, N0 = prior_requests, s0 = prior_share):
  long(q, r)   = pacing_min_uncached_tokens(r) > 0 and uncached(q, r) >= pacing_min_uncached_tokens(r)
                 (r: the replica chosen; uncached(q, r) from the router's prefix index, the same estimate
                 as predicted_ttft.py's)
  judged once  each request is judged when it is first chosen a replica; later calls for it (a retry)
               get the same answer and count nothing
  share(q)     = (m + s0 * N0) / (n + N0) over the last W judged requests, q included: n of them, m long.
               The prior counts as N0 requests of share s0, so that the first long prompts of a fresh
               pool are judged against an expectation rather than against a handful of requests.
  permit(q)    = not long(q, r) or share(q) <= s*
A request that is not long gets a permit too: whether it is long is the replica's call, from its own
cache; the router only withholds pacing from a long prompt when long prompts are too common.
Parameters: 0 <= s* <= 1, W >= 1, N0 >= 0, 0 <= s0 <= 1.
Complexity: O(1) per judgement (amortized); memory O(W + the requests judged and still remembered).
"""

from __future__ import annotations

from collections import OrderedDict, deque

from ray_dspine.engines.protocol import LoadSnapshot

REMEMBERED_REQUESTS = 10_000  # request ids whose answer is kept for retries


def is_long(load: LoadSnapshot, uncached_tokens: int) -> bool:
    """Rule `long`: would a replica reporting `load` pace a prompt with this many uncached tokens?"""
    threshold = load.pacing_min_uncached_tokens
    return threshold > 0 and uncached_tokens >= threshold


class PacingPermits:
    def __init__(self, max_long_share: float, window_requests: int, prior_requests: int, prior_share: float):
        if not 0.0 <= max_long_share <= 1.0 or not 0.0 <= prior_share <= 1.0:
            raise ValueError("max_long_share and prior_share must be within [0, 1]")
        if window_requests < 1 or prior_requests < 0:
            raise ValueError("window_requests must be >= 1 and prior_requests >= 0")
        self.max_long_share = max_long_share
        self.prior_requests = prior_requests
        self.prior_share = prior_share
        self._window: deque[bool] = deque(maxlen=window_requests)
        self._num_long = 0
        self._answers: OrderedDict[str, bool] = OrderedDict()

    def share(self) -> float:
        """The long prompts' share over the window, prior included (rule `share`)."""
        prior = self.prior_share * self.prior_requests
        total = len(self._window) + self.prior_requests
        return (self._num_long + prior) / total if total else 0.0

    def answer(self, request_id: str) -> bool | None:
        """The permit `judge` gave this request, while it is remembered; None if it was never judged."""
        return self._answers.get(request_id)

    def judge(self, request_id: str, long: bool) -> bool:
        """Rules `judged once`, `share` and `permit`: may the replica pace this request?"""
        if request_id in self._answers:
            return self._answers[request_id]
        if len(self._window) == self._window.maxlen and self._window[0]:
            self._num_long -= 1
        self._window.append(long)
        self._num_long += long
        answer = not long or self.share() <= self.max_long_share + 1e-12
        self._answers[request_id] = answer
        if len(self._answers) > REMEMBERED_REQUESTS:
            self._answers.popitem(last=False)
        return answer
