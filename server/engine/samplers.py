"""b10621's samplers (src/llama-sampler.cpp), one class each, on the candidates of one step in its float32
arithmetic; sampling.py chains them in b10621's order.

The candidates are b10621's llama_token_data_array: ids, logits, probabilities, a `sorted` flag and the
selected index. Which samplers sort, which keep the vocabulary order and where a draw lands all follow
upstream, because the order of the candidates decides which token a uniform draw selects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .rng import MT19937, canonical_float, rng_seed

F32 = np.float32
NEG_INF = F32(-np.inf)


def expf(x: np.ndarray) -> np.ndarray:
    """expf, correctly rounded (computed in double)."""
    return np.exp(x.astype(np.float64)).astype(np.float32)


def logf(x: float | np.floating) -> np.float32:
    return F32(math.log(float(x))) if x > 0 else NEG_INF


def fsum(values: np.ndarray) -> np.float32:
    """A float accumulated left to right, as upstream's loops do (np.sum would sum pairwise)."""
    return np.cumsum(values, dtype=np.float32)[-1] if len(values) else F32(0)


@dataclass
class Candidates:
    ids: np.ndarray
    logits: np.ndarray
    p: np.ndarray
    sorted: bool = False
    selected: int = -1

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> "Candidates":
        logits = np.ascontiguousarray(logits, dtype=np.float32).copy()
        return cls(np.arange(len(logits), dtype=np.int32), logits, np.zeros(len(logits), np.float32))

    @property
    def size(self) -> int:
        return len(self.ids)

    def keep(self, index: np.ndarray | slice) -> None:
        self.ids, self.logits, self.p = self.ids[index], self.logits[index], self.p[index]

    def sort_desc(self, n: int | None = None) -> None:
        """llama_token_data_array_partial_sort_inplace: the n best (all by default), best first."""
        n = self.size if n is None else n
        if n < self.size // 4:  # the best n only: those at or above the n-th best value, ordered, ties by
            # position (a value partition and a mask: ~2x faster than an index partition of the vocabulary)
            kth = np.partition(self.logits, self.size - n)[self.size - n]
            part = np.flatnonzero(self.logits >= kth)
            order = (
                part[np.lexsort((part, -self.logits[part]))][:n]
                if len(part) >= n
                else np.argsort(-self.logits, kind="stable")[:n]
            )  # (NaN logits: they compare false)
        else:
            order = np.argsort(-self.logits, kind="stable")[:n]
        self.keep(order)
        self.sorted = True

    def softmax(self, do_sort: bool) -> None:
        """llama_sampler_softmax_impl."""
        if do_sort and not self.sorted:
            self.sort_desc()
        max_l = self.logits[0] if self.sorted else self.logits.max()
        p = expf(self.logits - max_l)
        self.p = (p / fsum(p)).astype(np.float32)


def temp_impl(cur: Candidates, temp: np.float32) -> None:
    if cur.size == 0:
        return
    if temp <= 0:  # keep the first highest logit only
        best = int(np.argmax(cur.logits))
        keep = cur.logits[best]
        cur.logits[:] = NEG_INF
        cur.logits[best] = keep
        return
    cur.logits = (cur.logits / temp).astype(np.float32)


class Sampler:
    def apply(self, cur: Candidates) -> None:
        raise NotImplementedError

    def accept(self, token: int) -> None:
        pass


@dataclass
class LogitBias(Sampler):
    bias: list[tuple[int, np.float32]]

    def apply(self, cur: Candidates) -> None:
        for tok, b in self.bias:
            if 0 <= tok < cur.size and cur.ids[tok] == tok:
                cur.logits[tok] = F32(cur.logits[tok] + b)
            else:
                hit = np.nonzero(cur.ids == tok)[0]
                if len(hit):
                    cur.logits[hit[0]] = F32(cur.logits[hit[0]] + b)


@dataclass
class Penalties(Sampler):
    last_n: int
    repeat: np.float32
    freq: np.float32
    present: np.float32
    prev: list[int] = field(default_factory=list)
    counts: dict[int, int] = field(default_factory=dict)

    def accept(self, token: int) -> None:
        self.counts[token] = self.counts.get(token, 0) + 1
        if len(self.prev) >= self.last_n:
            old = self.prev.pop(0)
            self.counts[old] -= 1
            if not self.counts[old]:
                del self.counts[old]
        self.prev.append(token)

    def apply(self, cur: Candidates) -> None:
        if not self.counts:
            cur.sorted = False
            return
        toks = np.fromiter(self.counts, dtype=np.int32)
        where = np.nonzero(np.isin(cur.ids, toks))[0]
        for i in where:
            count = self.counts[int(cur.ids[i])]
            logit = cur.logits[i]
            logit = F32(logit * self.repeat) if logit <= 0 else F32(logit / self.repeat)
            cur.logits[i] = F32(logit - (F32(count) * self.freq + F32(count > 0) * self.present))
        cur.sorted = False


@dataclass
class Dry(Sampler):
    """DRY (ported by b10621 from Koboldcpp): penalize tokens that would extend a repeat of the context's
    tail, with sequence breakers (head token -> tail tokens) that cut the repeats it considers."""

    multiplier: np.float32
    base: np.float32
    allowed_length: int
    last_n: int
    breakers: dict[int, list[tuple[int, ...]]]
    last: list[int] = field(default_factory=list)

    def accept(self, token: int) -> None:
        self.last.append(token)
        if len(self.last) > self.last_n:
            del self.last[0]

    def apply(self, cur: Candidates) -> None:  # noqa: C901
        n = min(len(self.last), self.last_n)
        if n <= self.allowed_length:
            return
        rat = self.last[::-1]  # rat(i): the i-th token from the end
        rep_limit = n
        for i in range(n):  # the nearest restart sequence limits the repeat length
            tails = self.breakers.get(rat[i])
            if tails is None:
                continue
            longest = -1
            for tail in tails:
                if longest < len(tail) <= i and all(tail[o] == rat[i - o - 1] for o in range(len(tail))):
                    longest = len(tail)
            if longest >= 0:
                rep_limit = i - longest
                break
        if rep_limit < self.allowed_length:
            return
        last = n - 1
        count = [0] * n
        lt = rt = 0
        for k in range(1, n):  # the Z-algorithm, backwards: how far each suffix repeats
            if k > rt:
                m = 0
                while m + k < n and rat[m] == rat[m + k]:
                    m += 1
                count[last - k] = min(m, rep_limit)
                if m > 0:
                    lt, rt = k, k + m - 1
            else:
                p = k - lt
                right = rt - k + 1
                if count[last - p] < right:
                    count[last - k] = min(count[last - p], rep_limit)
                else:
                    i = rt + 1
                    while i < n and rat[i] == rat[i - k]:
                        i += 1
                    count[last - k] = min(i - k, rep_limit)
                    lt, rt = k, i - 1
        max_repeat: dict[int, int] = {}
        for i in range(n - 1):
            if count[i] >= self.allowed_length:
                tok = rat[n - 2 - i]
                if max_repeat.get(tok, -1) < count[i]:
                    max_repeat[tok] = count[i]
        max_exponent = int(F32(88.7228391) / F32(math.log(float(self.base)))) if self.base > F32(1.000001) else 0
        for i in (
            np.nonzero(np.isin(cur.ids, np.fromiter(max_repeat, dtype=np.int32)))[0].tolist() if max_repeat else []
        ):
            tok = int(cur.ids[i])
            if any(len(t) == 0 for t in self.breakers.get(tok, ())):
                continue  # a single-token breaker is never penalized
            exp = max_repeat[tok] - self.allowed_length
            if max_exponent > 0 and exp > max_exponent:
                exp = max_exponent
            penalty = F32(float(self.multiplier) * float(self.base) ** exp)
            cur.logits[i] = F32(cur.logits[i] - penalty)
        cur.sorted = False


@dataclass
class TopNSigma(Sampler):
    n: np.float32

    def apply(self, cur: Candidates) -> None:
        if self.n <= 0 or cur.size <= 1:
            return
        valid = cur.logits[cur.logits != NEG_INF]
        mx = max(cur.logits[0], valid.max()) if len(valid) else cur.logits[0]
        mean = F32(fsum(valid) / F32(len(valid))) if len(valid) else F32(0)
        # float differences squared in double; upstream rounds the running sum to float at each step, this
        # sums in double once (the threshold moves by an ulp at most)
        sq = (valid - mean).astype(np.float64) ** 2
        acc = F32(np.cumsum(sq)[-1]) if len(valid) else F32(0)
        std = F32(math.sqrt(float(F32(acc / F32(len(valid)))))) if len(valid) else F32(0)
        cur.logits[cur.logits < F32(mx - F32(self.n * std))] = NEG_INF


@dataclass
class TopK(Sampler):
    k: int

    def apply(self, cur: Candidates) -> None:
        if self.k <= 0:
            return
        k = min(self.k, cur.size)
        if not cur.sorted:
            cur.sort_desc(k)
        cur.keep(slice(0, k))


@dataclass
class Typical(Sampler):
    p: np.float32
    min_keep: int

    def apply(self, cur: Candidates) -> None:
        if self.p >= 1:
            return
        cur.softmax(True)
        with np.errstate(divide="ignore", invalid="ignore"):
            logp = np.log(cur.p.astype(np.float64)).astype(np.float32)
            entropy = fsum((-cur.p * logp).astype(np.float32))
        shifted = np.abs(-logp - entropy).astype(np.float32)
        order = np.argsort(shifted, kind="stable")
        cum = np.cumsum(cur.p[order], dtype=np.float32)
        last = len(order)
        for i in range(len(order)):
            if cum[i] > self.p and (self.min_keep == 0 or i >= self.min_keep - 1):
                last = i + 1
                break
        cur.keep(order[:last])
        cur.sorted = False


@dataclass
class TopP(Sampler):
    p: np.float32
    min_keep: int

    def apply(self, cur: Candidates) -> None:
        if self.p >= 1:
            return
        cur.softmax(False)
        if not cur.sorted:
            # as upstream: the best 256 first, the whole vocabulary only if they do not reach p
            if cur.size > 1024:
                part = np.argpartition(-cur.logits, 255)[:256]
                part = part[np.lexsort((part, -cur.logits[part]))]
                cum = np.cumsum(cur.p[part], dtype=np.float32)
                hit = np.nonzero((cum >= self.p) & (np.arange(1, 257) >= self.min_keep))[0]
                if len(hit):
                    cur.keep(part[: hit[0] + 1])
                    cur.sorted = True
                    return
            order = np.argsort(-cur.logits, kind="stable")
            cur.keep(order)
            cur.sorted = True
        cum = np.cumsum(cur.p, dtype=np.float32)
        last = cur.size
        for i in range(cur.size):
            if cum[i] >= self.p and i + 1 >= self.min_keep:
                last = i + 1
                break
        cur.keep(slice(0, last))


@dataclass
class MinP(Sampler):
    p: np.float32
    min_keep: int

    def apply(self, cur: Candidates) -> None:
        if self.p <= 0 or not cur.size:
            return
        if not cur.sorted:
            min_logit = F32(max(F32(-3.4028235e38), cur.logits.max()) + logf(self.p))
            kept = np.nonzero(cur.logits >= min_logit)[0]
            if len(kept) and len(kept) >= self.min_keep:
                cur.keep(kept)
                return
            cur.sort_desc()
        min_logit = F32(cur.logits[0] + logf(self.p))
        i = 1
        while i < cur.size and not (cur.logits[i] < min_logit and i >= self.min_keep):
            i += 1
        cur.keep(slice(0, i))


@dataclass
class XTC(Sampler):
    probability: np.float32
    threshold: np.float32
    min_keep: int
    seed: int
    rng: MT19937 = field(init=False)

    def __post_init__(self) -> None:
        self.rng = MT19937(rng_seed(self.seed))

    def apply(self, cur: Candidates) -> None:
        if self.probability <= 0 or self.threshold > F32(0.5) or cur.size < 2:
            return
        if canonical_float(self.rng) > self.probability:
            return
        cur.softmax(True)
        pos_last = 0
        for i in range(cur.size):
            if cur.p[i] >= self.threshold:
                pos_last = i
            else:
                break
        if cur.size - pos_last >= self.min_keep and pos_last > 0:
            cur.keep(slice(pos_last, None))


@dataclass
class TempExt(Sampler):
    temp: np.float32
    delta: np.float32
    exponent: np.float32

    def apply(self, cur: Candidates) -> None:
        if self.delta <= 0:
            temp_impl(cur, self.temp)
            return
        min_temp, max_temp = max(F32(0), F32(self.temp - self.delta)), F32(self.temp + self.delta)
        if cur.size <= 1:
            return
        max_entropy = F32(-logf(F32(1) / F32(cur.size)))
        cur.softmax(True)
        pos = cur.p[cur.p > 0]
        entropy = F32(-fsum((pos * np.log(pos.astype(np.float64)).astype(np.float32)).astype(np.float32)))
        norm = F32(entropy / max_entropy)
        dyn = F32(min_temp + F32((max_temp - min_temp) * F32(float(norm) ** float(self.exponent))))
        temp_impl(cur, dyn)
        p = np.exp(cur.logits.astype(np.float64) - float(cur.logits[0]))
        cur.p = (p.astype(np.float32) / np.cumsum(p)[-1]).astype(np.float32)
