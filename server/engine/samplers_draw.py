"""b10621's samplers that select a token or reshape the tail of the chain (src/llama-sampler.cpp): infill,
adaptive-p, the final distribution draw and mirostat; the filters are in samplers.py."""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .rng import MT19937, canonical_double, discrete, rng_seed
from .samplers import (
    F32,
    NEG_INF,
    Candidates,
    Sampler,
    TopK,
    expf,
    fsum,
    logf,
)


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
        p_eog, p_txt = fsum(cur.p[eog]), fsum(cur.p[~eog])
        if F32(F32(3 * p_eog) * F32(cur.size)) > p_txt:  # p_txt / p_eog too low: the EOG tokens alone
            keep = np.flatnonzero(eog)
            p = cur.p[keep] / fsum(cur.p[keep])
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
        p = cur.p[keep] / fsum(cur.p[keep])
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
        p = expf(cur.logits - max_l)
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
                t_i = logf(F32(i + 2) / F32(i + 1))
                b_i = logf(F32(cur.p[i] / cur.p[i + 1]))
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
