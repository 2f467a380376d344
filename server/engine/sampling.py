"""b10621's sampler chain (common/sampling.cpp) over the samplers of samplers.py, in its order, so that on the
same probabilities the same seed draws the same token; and the engine's shortcut where the chain would draw
the argmax anyway.
"""

from __future__ import annotations

import math

import numpy as np

from ..grammar.constraint import GrammarMatcher
from .samplers import (
    F32,
    XTC,
    Candidates,
    Dry,
    LogitBias,
    MinP,
    Penalties,
    Sampler,
    TempExt,
    TopK,
    TopNSigma,
    TopP,
    Typical,
    expf,
    fsum,
)
from .samplers_draw import AdaptiveP, Dist, Infill, InfillVocab, Mirostat
from .types import SamplingParams


def _penalties_on(s: SamplingParams) -> bool:
    return max(s.repeat_last_n, 0) != 0 and not (
        F32(s.repeat_penalty) == 1 and F32(s.frequency_penalty) == 0 and F32(s.presence_penalty) == 0
    )


def _dry_on(s: SamplingParams) -> bool:
    return bool(F32(s.dry_multiplier) != 0 and F32(s.dry_base) >= 1 and max(s.dry_penalty_last_n, 0) != 0)


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
        "penalties": not _penalties_on(s),
        "dry": not _dry_on(s),
        "top_n_sigma": True,
        "top_k": True,
        "typ_p": F32(s.typical_p) >= 1,
        "top_p": True,
        "min_p": True,
        "infill": False,  # (EOT, EOG-only)
        "xtc": F32(s.xtc_probability) <= 0 or F32(s.xtc_threshold) > F32(0.5),
    }
    before = s.samplers[: s.samplers.index("temperature")]  # those after it see one candidate
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
                "penalties": lambda: (
                    None
                    if not _penalties_on(s)
                    else Penalties(
                        max(s.repeat_last_n, 0), f(s.repeat_penalty), f(s.frequency_penalty), f(s.presence_penalty)
                    )
                ),
                "dry": lambda: (
                    Dry(
                        f(s.dry_multiplier),
                        f(s.dry_base),
                        s.dry_allowed_length,
                        max(s.dry_penalty_last_n, 0),
                        {h: [tuple(t) for t in tails] for h, tails in s.dry_breakers},
                    )
                    if _dry_on(s)
                    else None
                ),
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
            final = (
                AdaptiveP(f(s.adaptive_target), f(s.adaptive_decay), s.seed)
                if "adaptive_p" in s.samplers
                else Dist(s.seed)
            )
            self.samplers.append(final)
        else:
            self.samplers.append(TempExt(f(s.temperature), f(0), f(1)))
            self.samplers.append(Mirostat(n_vocab, s.seed, f(s.mirostat_tau), f(s.mirostat_eta), version=s.mirostat))

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


def sample_constrained(chain: Chain, grammar: GrammarMatcher | None, logits: np.ndarray) -> int:
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
    p = expf(logits - logits[top[0]])
    p = (p / fsum(p)).astype(np.float32)
    return float(p[token]), [(int(i), float(p[i])) for i in top]
