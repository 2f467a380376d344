"""b10621's sampler chain (src/llama-sampler.cpp, common/sampling.cpp) on one step's logits, in its order
and its float32 arithmetic, so that on the same probabilities the same seed draws the same token.

The candidates are b10621's llama_token_data_array: ids, logits, probabilities, a `sorted` flag and the
selected index. Which samplers sort, which keep the vocabulary order and where a draw lands all follow
upstream, because the order of the candidates decides which token a uniform draw selects.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .rng import MT19937, canonical_double, canonical_float, discrete, rng_seed
from .types import SamplingParams

F32 = np.float32
NEG_INF = F32(-np.inf)


def _expf(x: np.ndarray) -> np.ndarray:
    """expf, correctly rounded (computed in double)."""
    return np.exp(x.astype(np.float64)).astype(np.float32)


def _logf(x) -> np.float32:
    return F32(math.log(float(x))) if x > 0 else NEG_INF


def _fsum(values: np.ndarray) -> np.float32:
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
            order = part[np.lexsort((part, -self.logits[part]))][:n] if len(part) >= n \
                else np.argsort(-self.logits, kind="stable")[:n]  # (NaN logits: they compare false)
        else:
            order = np.argsort(-self.logits, kind="stable")[:n]
        self.keep(order)
        self.sorted = True

    def softmax(self, do_sort: bool) -> None:
        """llama_sampler_softmax_impl."""
        if do_sort and not self.sorted:
            self.sort_desc()
        max_l = self.logits[0] if self.sorted else self.logits.max()
        p = _expf(self.logits - max_l)
        self.p = (p / _fsum(p)).astype(np.float32)


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

    def apply(self, cur: Candidates) -> None:
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
        for i in np.nonzero(np.isin(cur.ids, np.fromiter(max_repeat, dtype=np.int32)))[0] if max_repeat else []:
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
        mean = F32(_fsum(valid) / F32(len(valid))) if len(valid) else F32(0)
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
            entropy = _fsum((-cur.p * logp).astype(np.float32))
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
            min_logit = F32(max(F32(-3.4028235e38), cur.logits.max()) + _logf(self.p))
            kept = np.nonzero(cur.logits >= min_logit)[0]
            if len(kept) and len(kept) >= self.min_keep:
                cur.keep(kept)
                return
            cur.sort_desc()
        min_logit = F32(cur.logits[0] + _logf(self.p))
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
        max_entropy = F32(-_logf(F32(1) / F32(cur.size)))
        cur.softmax(True)
        pos = cur.p[cur.p > 0]
        entropy = F32(-_fsum((pos * np.log(pos.astype(np.float64)).astype(np.float32)).astype(np.float32)))
        norm = F32(entropy / max_entropy)
        dyn = F32(min_temp + F32((max_temp - min_temp) * F32(float(norm) ** float(self.exponent))))
        temp_impl(cur, dyn)
        p = np.exp(cur.logits.astype(np.float64) - float(cur.logits[0]))
        cur.p = (p.astype(np.float32) / np.cumsum(p)[-1]).astype(np.float32)


@dataclass(frozen=True)
class InfillVocab:
    """What b10621's infill sampler asks of the vocabulary: is_eog, token_to_piece(special=false) and the
    token its fallback emits (token_eot(), else token_eos())."""

    eog: frozenset[int]
    piece: Callable[[int], bytes]
    end: int | None


@dataclass
class Infill(Sampler):
    """llama_sampler_infill_apply: end the fill when end-of-generation is likely enough, merge each token
    into a more probable one whose text it starts or extends, then keep the tokens above two thresholds."""

    vocab: InfillVocab

    def apply(self, cur: Candidates) -> None:
        cur.softmax(True)
        eog = np.isin(cur.ids, np.fromiter(self.vocab.eog, dtype=np.int32, count=len(self.vocab.eog)))
        p_eog, p_txt = _fsum(cur.p[eog]), _fsum(cur.p[~eog])
        if F32(F32(3 * p_eog) * F32(cur.size)) > p_txt:  # p_txt / p_eog too low: the EOG tokens alone
            keep = np.flatnonzero(eog)
            p = cur.p[keep] / _fsum(cur.p[keep])
            cur.keep(keep)
            cur.p = p.astype(np.float32)
            return
        self._combine(cur)
        # the first threshold; the EOG tokens stay whatever their probability
        keep = np.flatnonzero(eog | (cur.p >= F32(0.2)))
        n_non_eog = int(np.count_nonzero(~eog[keep]))
        if n_non_eog == 0:  # one candidate: EOT (else EOS), logit 1, in the first slot with its probability
            first = keep[0] if len(keep) else 0
            if self.vocab.end is None:
                raise RuntimeError("the infill sampler needs an EOT or EOS token")
            cur.keep(np.array([first]))
            cur.ids[0], cur.logits[0] = self.vocab.end, F32(1)
            return
        self._renormalize(cur, keep)
        keep = np.flatnonzero(np.isin(cur.ids, list(self.vocab.eog)) | (cur.p >= F32(1.0 / (n_non_eog + 1))))
        self._renormalize(cur, keep)

    @staticmethod
    def _renormalize(cur: Candidates, keep: np.ndarray) -> None:
        p = cur.p[keep] / _fsum(cur.p[keep])
        cur.keep(keep)
        cur.p = p.astype(np.float32)

    def _combine(self, cur: Candidates) -> None:
        """For i0 then i1 in candidate order, a live i0 whose non-empty piece starts live i1's piece merges
        the two into the more probable (i0 on a tie): that one adds the other's probability, the other gets
        logit -inf and p 0. Only the pairs that match do anything, so each i0 visits the candidates whose
        pieces extend its own (a run of the pieces in byte order) rather than all of them."""
        pieces = [self.vocab.piece(int(t)) for t in cur.ids]
        by_text = sorted(range(cur.size), key=pieces.__getitem__)
        texts = [pieces[i] for i in by_text]
        alive = (cur.logits != NEG_INF).tolist()
        p = cur.p
        for i0 in range(cur.size):
            head = pieces[i0]
            if not alive[i0] or not head:
                continue
            k = bisect_left(texts, head)
            ext = []
            while k < len(texts) and texts[k].startswith(head):
                if by_text[k] != i0:
                    ext.append(by_text[k])
                k += 1
            for i1 in sorted(ext):
                if not alive[i0]:
                    break
                if not alive[i1]:
                    continue
                dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
                p[dst] = F32(p[dst] + p[src])
                cur.logits[src], p[src] = NEG_INF, F32(0)
                alive[src] = False


@dataclass
class AdaptiveP(Sampler):
    """adaptive-p: reshapes the distribution around a target probability steered by an EMA of the chosen
    tokens' probabilities, then draws (it takes the final draw's place)."""

    target: np.float32
    decay: np.float32
    seed: int

    def __post_init__(self) -> None:
        self.decay = F32(min(max(self.decay, F32(0)), F32(0.99)))
        self.weighted_sum = F32(self.target / F32(1 - self.decay))
        self.total_weight = F32(F32(1) / F32(1 - self.decay))
        self.rng = MT19937(rng_seed(self.seed))
        self.pending: tuple[int, np.float32] | None = None

    def apply(self, cur: Candidates) -> None:
        cur.softmax(False)
        if self.target < 0:
            cur.selected = discrete(cur.p, self.rng)
            return
        original = cur.p.copy()
        t = min(max(self.target, F32(0)), F32(1))
        adapted = t if self.total_weight == 0 else F32(F32(2) * t - F32(self.weighted_sum / self.total_weight))
        adapted = min(max(adapted, F32(0)), F32(1))
        finite = cur.logits != NEG_INF
        dist = np.abs((cur.p - adapted) * (F32(1) / F32(0.3))).astype(np.float32)
        shaped = (F32(5) - F32(10) * dist * dist / (F32(1) + dist)).astype(np.float32)
        cur.logits = np.where(finite, shaped, cur.logits).astype(np.float32)
        cur.softmax(False)
        idx = discrete(cur.p, self.rng)
        cur.selected = idx
        self.pending = (int(cur.ids[idx]), original[idx])

    def accept(self, token: int) -> None:
        if self.pending is not None and self.pending[0] == token:
            self.weighted_sum = F32(self.pending[1] + F32(self.decay * self.weighted_sum))
            self.total_weight = F32(F32(1) + F32(self.decay * self.total_weight))
        self.pending = None


@dataclass
class Dist(Sampler):
    seed: int
    rng: MT19937 = field(init=False)

    def __post_init__(self) -> None:
        self.rng = MT19937(rng_seed(self.seed))

    def apply(self, cur: Candidates) -> None:
        if cur.size == 0:
            cur.selected = -1
            return
        cur.selected = 0
        if cur.size == 1:
            canonical_double(self.rng)  # one draw per output, as the backend sampler keeps it aligned
            cur.p[0] = 1
            return
        max_l = cur.logits[0] if cur.sorted else cur.logits.max()
        p = _expf(cur.logits - max_l)
        cum = np.cumsum(p.astype(np.float64))
        rnd = canonical_double(self.rng)
        hit = np.nonzero(cum >= cum[-1] * rnd)[0]
        cur.selected = int(hit[0]) if len(hit) else cur.size - 1
        cur.p = (p / cum[-1]).astype(np.float32)


@dataclass
class Mirostat(Sampler):
    n_vocab: int
    seed: int
    tau: np.float32
    eta: np.float32
    m: int = 100
    version: int = 1
    mu: np.float32 = field(init=False)
    rng: MT19937 = field(init=False)

    def __post_init__(self) -> None:
        self.mu = F32(2 * self.tau)
        self.rng = MT19937(rng_seed(self.seed))

    def apply(self, cur: Candidates) -> None:
        cur.softmax(True)
        if self.version == 1:
            sum_ti_bi, sum_ti_sq = F32(0), F32(0)
            for i in range(min(self.m - 1, cur.size - 1)):
                t_i = _logf(F32(i + 2) / F32(i + 1))
                b_i = _logf(F32(cur.p[i] / cur.p[i + 1]))
                sum_ti_bi = F32(sum_ti_bi + F32(t_i * b_i))
                sum_ti_sq = F32(sum_ti_sq + F32(t_i * t_i))
            s_hat = F32(sum_ti_bi / sum_ti_sq)
            eps = F32(s_hat - 1)
            k = F32(F32(eps * F32(2.0 ** float(self.mu))) / F32(1 - F32(float(self.n_vocab) ** -float(eps))))
            k = F32(float(k) ** (1 / float(s_hat)))
            TopK(max(int(k), 1)).apply(cur)
        else:
            with np.errstate(divide="ignore"):
                surprise = -np.log2(cur.p.astype(np.float64)).astype(np.float32)
            over = np.nonzero(surprise > self.mu)[0]
            cur.keep(slice(0, max(int(over[0]) if len(over) else cur.size, 1)))
        cur.softmax(True)
        idx = discrete(cur.p, self.rng)
        cur.selected = idx
        observed = F32(-math.log2(float(cur.p[idx]))) if cur.p[idx] > 0 else F32(np.inf)
        self.mu = F32(self.mu - F32(self.eta * F32(observed - self.tau)))


def _penalties_on(s: SamplingParams) -> bool:
    return max(s.repeat_last_n, 0) != 0 and not (
        F32(s.repeat_penalty) == 1 and F32(s.frequency_penalty) == 0 and F32(s.presence_penalty) == 0)


def _dry_on(s: SamplingParams) -> bool:
    return F32(s.dry_multiplier) != 0 and F32(s.dry_base) >= 1 and max(s.dry_penalty_last_n, 0) != 0


def draws_the_argmax(s: SamplingParams) -> tuple[int, ...] | None:
    """The tokens the logit bias bans when the chain's draw is the first highest of the other logits
    whatever the logits, else None. So it is when the logit bias only bans (-inf), no sampler before the
    temperature changes a logit or can drop the best candidate (penalties, DRY, typical and XTC off; top-k,
    top-p, min-p and top-n-sigma keep the best), and a temperature <= 0 without dynamic range keeps the best
    alone (temp_impl), which the final draw then takes. The engine skips the chain for such requests (a
    greedy request through the full chain costs ~0.5 ms a token on a 49k vocabulary)."""
    if s.mirostat != 0 or "adaptive_p" in s.samplers or "temperature" not in s.samplers:
        return None
    if F32(s.temperature) > 0 or F32(s.dynatemp_range) > 0:
        return None
    if any(not (math.isinf(b) and b < 0) for _, b in s.logit_bias):
        return None
    keeps_the_best = {
        "penalties": not _penalties_on(s), "dry": not _dry_on(s), "top_n_sigma": True, "top_k": True,
        "typ_p": F32(s.typical_p) >= 1, "top_p": True, "min_p": True, "infill": False,  # (EOT, EOG-only)
        "xtc": F32(s.xtc_probability) <= 0 or F32(s.xtc_threshold) > F32(0.5),
    }
    before = s.samplers[:s.samplers.index("temperature")]  # those after it see one candidate
    if not all(keeps_the_best.get(name, False) for name in before):
        return None
    return tuple(sorted({t for t, _ in s.logit_bias}))


class Chain:
    """common_sampler: the logit bias, then the samplers in order and a final draw (or Mirostat)."""

    def __init__(self, params: SamplingParams, n_vocab: int, infill: InfillVocab | None = None):
        f = F32
        s = params
        self.samplers: list[Sampler] = []
        if s.logit_bias:
            self.samplers.append(LogitBias([(t, f(b)) for t, b in s.logit_bias]))
        if s.mirostat == 0:
            build = {
                "penalties": lambda: None if not _penalties_on(s)
                else Penalties(max(s.repeat_last_n, 0), f(s.repeat_penalty), f(s.frequency_penalty),
                               f(s.presence_penalty)),
                "dry": lambda: Dry(f(s.dry_multiplier), f(s.dry_base), s.dry_allowed_length, max(s.dry_penalty_last_n, 0),
                                   {h: [tuple(t) for t in tails] for h, tails in s.dry_breakers})
                if _dry_on(s) else None,
                "top_n_sigma": lambda: TopNSigma(f(s.top_n_sigma)),
                "top_k": lambda: TopK(s.top_k),
                "typ_p": lambda: Typical(f(s.typical_p), s.min_keep),
                "top_p": lambda: TopP(f(s.top_p), s.min_keep),
                "min_p": lambda: MinP(f(s.min_p), s.min_keep),
                "xtc": lambda: XTC(f(s.xtc_probability), f(s.xtc_threshold), s.min_keep, s.seed),
                "temperature": lambda: TempExt(f(s.temperature), f(s.dynatemp_range), f(s.dynatemp_exponent)),
                "infill": lambda: Infill(infill or InfillVocab(frozenset(), lambda _t: b"", None)),
                "adaptive_p": lambda: None,  # it replaces the final draw, below
            }
            for name in s.samplers:
                sampler = build[name]()
                if sampler is not None:
                    self.samplers.append(sampler)
            final = AdaptiveP(f(s.adaptive_target), f(s.adaptive_decay), s.seed) if "adaptive_p" in s.samplers \
                else Dist(s.seed)
            self.samplers.append(final)
        else:
            self.samplers.append(TempExt(f(s.temperature), f(0), f(1)))
            self.samplers.append(Mirostat(n_vocab, s.seed, f(s.mirostat_tau), f(s.mirostat_eta),
                                          version=s.mirostat))

    def accept(self, token: int) -> None:
        for s in self.samplers:
            s.accept(token)

    def sample(self, logits: np.ndarray) -> int:
        cur = Candidates.from_logits(logits)
        for s in self.samplers:
            s.apply(cur)
        self.last = cur
        return int(cur.ids[cur.selected])

    def post_probs(self, token: int, n: int) -> tuple[float, list[tuple[int, float]]]:
        """common_sampler_get_candidates(sorted) after the draw: the token's and the top n probabilities,
        stopping at the first zero."""
        cur = self.last
        order = np.arange(cur.size) if cur.sorted else np.argsort(-cur.p, kind="stable")
        ids, p = cur.ids[order], cur.p[order]
        hit = np.nonzero(ids == token)[0]
        top = []
        for i in range(min(n, len(ids))):
            if p[i] == 0:
                break
            top.append((int(ids[i]), float(p[i])))
        return (float(p[hit[0]]) if len(hit) else 1.0), top


def sample_constrained(chain: Chain, grammar, logits: np.ndarray) -> int:
    """common_sampler_sample(grammar_first = false): draw unconstrained, keep the token if the grammar
    takes it, otherwise draw again from the logits with the grammar applied first (the chain runs twice,
    its random stream advancing twice, as upstream's does)."""
    token = chain.sample(logits)
    if grammar is None or not grammar.active or grammar.allows(token):
        return token
    allowed = grammar.mask()
    if not allowed.any():  # upstream draws from all -inf and fails accepting it; nothing is drawn here
        raise GrammarDeadEnd(token)
    masked = np.where(allowed, np.asarray(logits, dtype=np.float32), np.float32(-np.inf))
    return chain.sample(masked)


class GrammarDeadEnd(RuntimeError):
    """The grammar allows no token at all (a class like [z-a], an out-of-range token terminal)."""

    def __init__(self, token: int):
        super().__init__(token)
        self.token = token


def pre_probs(logits: np.ndarray, token: int, n: int) -> tuple[float, list[tuple[int, float]]]:
    """get_token_probabilities(): the softmax of the raw logits, the token's and the top n probabilities."""
    logits = np.asarray(logits, dtype=np.float32)
    n = min(n, len(logits))
    top = np.argpartition(-logits, n - 1)[:n] if n < len(logits) else np.arange(len(logits))
    top = top[np.lexsort((top, -logits[top]))]
    p = _expf(logits - logits[top[0]])
    p = (p / _fsum(p)).astype(np.float32)
    return float(p[token]), [(int(i), float(p[i])) for i in top]
