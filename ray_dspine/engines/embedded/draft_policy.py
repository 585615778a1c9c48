"""Adaptive draft length: draft only as many tokens as pay for their verification, down to none.

Rules (per request, at every decode step; k = draft tokens verified with the step's last token):
  acceptance: per draft position i = 1..K, the request's rate of accepting the i-th draft token given
              that the first i - 1 were accepted, from exponentially decayed counts (every observation
              decays every position: s_i <- lambda * s_i, n_i <- lambda * n_i, then adds what it observed):
                a_1 = (s_1 + 1/2) / (n_1 + 1),    a_i = (s_i + a_{i-1}) / (n_i + 1) for i >= 2
              (a position never tried takes the rate before it, with the weight of one trial; a_1
              starts at 1/2, and an always-rejected request settles at a_1 = (1/2) / (1/(1 - lambda) + 1),
              1/42 at lambda = 0.95.) A verify step that drafted k and accepted m adds a hit (1, 1) at
              positions 1..m and, if m < k, a miss (0, 1) at position m + 1 (the bonus token is no
              trial). A step that drafted nothing while the drafter had a proposal is a free shadow trial
              at position 1: a hit if the proposal's first token is the token the step produced, else a
              miss; no proposal adds nothing. `alpha` = a_1.
              Why per position: prompt-lookup drafts are bursty (a draft copied from a repeated region is
              right all along or wrong at its first token), so once the first token is accepted the next
              ones mostly are too; one rate for every position would undervalue long drafts.
  match:      a request keeps one set of these counts per length n of the suffix n-gram its drafter
              matched (drafter.py `lookup`): every step, proposal, shadow trial and decay above reads and
              updates only the set of the current proposal's n (`MatchedAcceptance`; with `by_match` off, one
              set for every n). Why: the length of the match predicts whether the proposal is right. On
              the tuning prompts, an always-8 policy had its first draft token accepted after 17-25% of
              1-token matches and after 89-100% of 3- and 4-token ones; in one set of counts, a run of weak
              matches would stop the drafting of a strong one.
  prior:      the engine pools every request's observations in one more set of counts per match length
              (the same rules, decayed per observation of that length), giving pooled rates b_1..b_K for
              each n. A request's counts for an n start, when it first proposes after an n-token match,
              from w pseudo-trials of the pool's: s_i = w * b_i, n_i = w at every position (w =
              prior_weight; w = 0 is the neutral start above). Why: a request otherwise spends its first
              steps on each match length learning what the traffic already showed (on answers of a few
              dozen steps, a large part of the request), and its own evidence outweighs the prior after
              about w steps. A seeded sampled request keeps the neutral start and feeds no pool, so its
              draws do not depend on other traffic.
  value:      E(k) = 1 + a_1 + a_1 a_2 + ... + a_1 ... a_k tokens per step: the expected tokens of a
              k-token draft (each position reached only if all before it were accepted). With every a_i
              equal to alpha this is (1 - alpha^(k+1)) / (1 - alpha) (`expected_tokens`).
  buckets:    draft lengths are measured in buckets b(0) = 0, b(k) = bitlength(k - 1) + 1 for k >= 1:
              {0}, {1}, {2}, {3, 4}, {5..8}, {9..16}, {17..32}, {33..64}; hi(b) = 0, 1, 2, 4, 8, ...
              is a bucket's longest length, lo(b) = 0, 1, 2, 3, 5, ... its shortest.
  cost:       `StepCosts` keeps, per bucket, C[b] = EMA (weight w of the newest) of the measured
              seconds of decode steps with b(k) = b, and t[b] = the clock when it was last measured.
              The cost of a k-token step is c(k) = C'[b(k)], where an unmeasured bucket is filled
              conservatively (step cost assumed nondecreasing in k, so a fill can only overstate it):
                C'[b] = C[b]                                        if measured, else
                C'[b] = C[b+]            b+ = the nearest larger measured bucket, else
                C'[b] = C[b-] * (1 + rho * hi(b)) / (1 + rho * hi(b-))   b- = the nearest smaller one
              with rho = prior_ratio. Before bucket 0 (the autoregressive step) is measured, and always
              for a sampled request with a seed (measured times vary from run to run, and so would its
              draws), the prior is used: c(k) = 1 + rho * k.
  choice:     k* = argmax over k in {0, 1, ..., K} of E(k) / c(k), K = min(num_draft_tokens, the
              proposal's length); ties go to the smaller k. E(0) / c(0) is the autoregressive rate, so
              a step drafts only when drafting is expected to produce more tokens per second, and a
              request whose drafts are rejected falls to k = 0 and decodes at the autoregressive rate
              while its shadow trials keep measuring a_1.
  grow:       (sequence.py `choose_draft`, config `draft_grow_on_full_accept`) when a request's latest verify
              step accepted its whole draft of k >= 1 tokens and its next proposal, of length L, follows a
              match of the same length n, that step drafts max(k*, min(2k, L)) instead of k*; any other step
              clears it. Why: positions past the longest draft a request has tried keep the pool's prior
              (rule `prior`), so a request that keeps accepting short drafts whole may never try the longer
              ones that would pay; doubling tries them, and the request's own counts at those positions
              decide from then on. A seeded sampled request never grows. On the tuning prompts, two runs:
              +1.4% and +1.5% overall, code edits +4% and +6%, chat unchanged.
  explore:    engine-wide, at most once per T seconds (explore_interval_s, by the injected clock): at a
              step of an unseeded request with a proposal of length L >= 1, at time `now`, let
              b* = the bucket with lo(b) <= L whose t[b] is oldest (unmeasured first; ties to the
              smaller b). If now - t_explore >= T and (b* is unmeasured or now - t[b*] >= T), the step
              drafts k = min(hi(b*), L) instead of k*, and t_explore = now (t_explore starts at -inf).
              The step is measured like any other, so every reachable bucket is refreshed at least
              every (number of buckets) * T seconds while steps keep coming.
  batch:      a batched step of n >= 2 requests (engine.py) has its own table c_n, kept by the rules
              above but indexed by the step's total draft tokens k_tot = k_1 + ... + k_n (K = n * the
              per-request maximum): c_n(k_tot) = seconds of a step of n requests verifying k_tot drafts in
              all. Requests choose in running order: request i takes
                k_i = argmax over k of (R_i + E_i(k)) / c_n(D_i + k)      (ties to the smaller k)
              where D_i = the drafts the earlier requests chose and R_i = their expected tokens E_j(k_j)
              plus 1 for each later request (counted as not drafting): the step's expected tokens per
              second. With n = 1 (R = D = 0) this is `choice`. Exploration of c_n: at a batched step, with
              L = the summed proposals of the requests that choose (adaptive, unseeded, with a proposal),
              `explore(L)` may return a total t; those requests then take their proposals in order until
              t drafts are taken, instead of choosing. Seeded sampled requests keep the prior of a step alone.
Parameters: lambda in (0, 1] (history_decay, per observation); prior_weight w in [0, 64] pseudo-trials;
weight in (0, 1] of the newest cost sample; prior_ratio rho >= 0; T > 0 seconds; K in [1, 64] tokens.
Costs in seconds (any unit for the prior).
Complexity: O(K) per choice and per observation, O(number of buckets) = O(log K) per exploration check.
"""

from __future__ import annotations


def expected_tokens(alpha: float, k: int) -> float:
    """E(k) when every position's rate is alpha (rule `value`)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def geometric_values(alpha: float, max_k: int) -> list[float]:
    """E(0..max_k) when every position's rate is alpha."""
    return [expected_tokens(alpha, k) for k in range(max_k + 1)]


def bucket(k: int) -> int:
    return 0 if k <= 0 else (k - 1).bit_length() + 1


def bucket_hi(b: int) -> int:
    return 0 if b == 0 else 1 << (b - 1)


def bucket_lo(b: int) -> int:
    return b if b <= 2 else bucket_hi(b - 1) + 1


def prior_costs(ratio: float, max_k: int) -> list[float]:
    """c(k) = 1 + ratio * k for k = 0..max_k (in units of one autoregressive step)."""
    return [1.0 + ratio * k for k in range(max_k + 1)]


def choose_draft_length(
    values: list[float], costs: list[float], rest_tokens: float = 0.0, rest_draft: int = 0
) -> int:
    """k* = argmax over k in 0..min(len(values), len(costs) - rest_draft) - 1 of
    (rest_tokens + values[k]) / costs[rest_draft + k], values[k] = E(k); ties go to the smaller k (rule
    `choice`; rest_tokens = rest_draft = 0 for a step alone)."""
    best_k, best = 0, (rest_tokens + values[0]) / costs[rest_draft]
    for k in range(1, min(len(values), len(costs) - rest_draft)):
        value = (rest_tokens + values[k]) / costs[rest_draft + k]
        if value > best * (1 + 1e-12):
            best_k, best = k, value
    return best_k


class AcceptanceTracker:
    """A request's per-position acceptance counts (rule `acceptance`) and the values E(k) (rule `value`)."""

    def __init__(self, history_decay: float, max_draft: int, pool: AcceptanceTracker | None = None):
        self.decay = history_decay
        self.accepted = [0.0] * max_draft  # s_i at index i - 1
        self.trials = [0.0] * max_draft  # n_i at index i - 1
        self.pool = pool  # the engine's pooled counts, fed every observation too (rule `prior`)

    def start_from(self, rates: list[float], weight: float) -> None:
        """Begin from `weight` pseudo-trials of `rates` at every position (rule `prior`)."""
        self.accepted = [weight * rate for rate in rates[: len(self.trials)]]
        self.trials = [float(weight)] * len(self.accepted)

    def rates(self) -> list[float]:
        """a_1 .. a_K."""
        rates, before = [], None
        for hits, tries in zip(self.accepted, self.trials):
            rate = (hits + 0.5) / (tries + 1.0) if before is None else (hits + before) / (tries + 1.0)
            rates.append(rate)
            before = rate
        return rates

    @property
    def alpha(self) -> float:
        return self.rates()[0] if self.trials else 0.5

    def values(self, max_k: int) -> list[float]:
        """E(0) .. E(min(max_k, K))."""
        values, reach = [1.0], 1.0
        for rate in self.rates()[:max_k]:
            reach *= rate
            values.append(values[-1] + reach)
        return values

    def _observe(self, hits: int, missed: bool) -> None:
        for i in range(len(self.trials)):
            self.accepted[i] *= self.decay
            self.trials[i] *= self.decay
        hits = min(hits, len(self.trials))
        for i in range(hits):
            self.accepted[i] += 1.0
            self.trials[i] += 1.0
        if missed and hits < len(self.trials):
            self.trials[hits] += 1.0
        if self.pool is not None:
            self.pool._observe(hits, missed)

    def observe_verify(self, num_drafted: int, num_accepted: int) -> None:
        if num_drafted > 0:
            self._observe(num_accepted, num_accepted < num_drafted)

    def observe_shadow(self, proposed_first: int, produced: int) -> None:
        hit = proposed_first == produced
        self._observe(1 if hit else 0, not hit)


class MatchedAcceptance:
    """One `AcceptanceTracker` per matched n-gram length (rule `match`), made when first needed; with a
    `pool` (the engine's MatchedAcceptance), each starts from `prior_weight` pseudo-trials of the pool's
    rates for its length and feeds the pool (rule `prior`)."""

    def __init__(
        self,
        history_decay: float,
        max_draft: int,
        by_match: bool = True,
        pool: MatchedAcceptance | None = None,
        prior_weight: float = 0.0,
    ):
        self.history_decay = history_decay
        self.max_draft = max_draft
        self.by_match = by_match
        self.pool = pool
        self.prior_weight = prior_weight
        self.trackers: dict[int, AcceptanceTracker] = {}

    def of(self, match_length: int) -> AcceptanceTracker:
        key = match_length if self.by_match else 0
        tracker = self.trackers.get(key)
        if tracker is None:
            pooled = None if self.pool is None else self.pool.of(key)
            tracker = self.trackers[key] = AcceptanceTracker(self.history_decay, self.max_draft, pooled)
            if pooled is not None and self.prior_weight > 0:
                tracker.start_from(pooled.rates(), self.prior_weight)
        return tracker


class StepCosts:
    """Engine-wide cost of a decode step per draft-length bucket (rules `buckets`, `cost`, `explore`)."""

    def __init__(self, weight: float, prior_ratio: float, max_k: int, explore_interval_s: float):
        self.weight = weight
        self.prior_ratio = prior_ratio
        self.explore_interval_s = explore_interval_s
        n = bucket(max_k) + 1
        self.seconds: list[float | None] = [None] * n  # C[b]
        self.measured_at: list[float | None] = [None] * n  # t[b]
        self.explored_at: float | None = None  # t_explore

    def record(self, num_drafted: int, seconds: float, now: float) -> None:
        b = bucket(num_drafted)
        if b >= len(self.seconds):
            return
        seconds, old = max(seconds, 1e-9), self.seconds[b]
        self.seconds[b] = seconds if old is None else (1.0 - self.weight) * old + self.weight * seconds
        self.measured_at[b] = now

    def _filled(self, b: int) -> float:
        if self.seconds[b] is not None:
            return self.seconds[b]
        for up in range(b + 1, len(self.seconds)):
            if self.seconds[up] is not None:
                return self.seconds[up]
        down = max(d for d in range(b) if self.seconds[d] is not None)  # bucket 0 is measured
        rho = self.prior_ratio
        return self.seconds[down] * (1.0 + rho * bucket_hi(b)) / (1.0 + rho * bucket_hi(down))

    def costs(self, max_k: int) -> list[float]:
        """c(k) for k = 0..max_k (rule `cost`)."""
        if self.seconds[0] is None:
            return prior_costs(self.prior_ratio, max_k)
        filled = [self._filled(b) for b in range(bucket(max_k) + 1)]
        return [filled[bucket(k)] for k in range(max_k + 1)]

    def explore(self, proposal_length: int, now: float) -> int | None:
        """The draft length to measure instead of k* at this step, or None (rule `explore`)."""
        T = self.explore_interval_s
        if proposal_length < 1 or (self.explored_at is not None and now - self.explored_at < T):
            return None
        reachable = [b for b in range(len(self.seconds)) if bucket_lo(b) <= proposal_length]
        oldest = min(reachable, key=lambda b: (self.measured_at[b] is not None, self.measured_at[b] or 0.0, b))
        if self.measured_at[oldest] is not None and now - self.measured_at[oldest] < T:
            return None
        self.explored_at = now
        return min(bucket_hi(oldest), proposal_length)
