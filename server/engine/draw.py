"""A request's draw from its logits: an argmax where b10621's chain would draw the argmax anyway, else the
sampler chain (with its grammar and reasoning-budget samplers, built at the first draw)."""

from __future__ import annotations

from typing import Callable

from ..backends import Backend
from ..grammar.constraint import GrammarMatcher, GrammarVocab
from .reasoning_budget import ReasoningBudget, accept_generated, grammar_should_apply
from .running import Draws, Running
from .samplers_draw import InfillVocab
from .sampling import Chain, GrammarDeadEnd, draws_the_argmax, pre_probs, sample_constrained
from .types import GenerationRequest, SamplingParams, TokenProbs


class DrawFailed(Exception):
    """The sequence cannot draw (b10621's exception inside the slot's sampling), in upstream's words."""


class Drawer:
    def __init__(
        self,
        backend: Backend,
        eog_ids: frozenset[int],
        piece: Callable[[int, bool], bytes],
        end_token: Callable[[], int | None],
        grammar_vocab: Callable[[], GrammarVocab | None],
    ):
        self.backend, self.eog_ids, self.piece = backend, eog_ids, piece
        self.end_token, self.grammar_vocab = end_token, grammar_vocab

    def _settle(self, draws: Draws, req: GenerationRequest) -> None:
        """Greedy or by the chain, at the first draw."""
        if req.sampling is None:
            draws.greedy, draws.banned = True, self.eog_ids if req.ignore_eos else frozenset()
        elif req.n_probs == 0 and req.grammar is None and req.reasoning_budget is None:
            banned = draws_the_argmax(req.sampling)  # (ignore_eos's bans are in its logit bias)
            draws.greedy, draws.banned = banned is not None, frozenset(banned or ())
        else:
            draws.greedy = False

    def _build_chain(self, run: Running, sampling: SamplingParams, prompt: list[int]) -> Chain:
        """b10621's init_sampler(): the prompt's tokens are the chain's first history."""
        req, draws = run.request, run.draws
        infill = (
            InfillVocab(self.eog_ids, lambda t: self.piece(t, False), self.end_token())
            if "infill" in sampling.samplers
            else None
        )
        chain = draws.chain = Chain(sampling, self.backend.n_vocab, infill)
        for t in prompt:
            if t >= 0:  # (an image's placeholders are no tokens: b10621 skips them)
                chain.accept(t)
        if req.grammar is not None:  # the prompt is not fed to it (is_generated = false)
            vocab = self.grammar_vocab()
            if vocab is None:
                raise RuntimeError("a grammar without the server's grammar vocabulary")
            draws.grammar = GrammarMatcher(req.grammar, vocab)
        if (spec := req.reasoning_budget) is not None:
            draws.budget = ReasoningBudget(
                [spec.start], spec.ends, spec.forced, spec.budget, token_bytes=lambda t: self.piece(t, False)
            )
            for t in spec.prefill:
                draws.budget.accept(t)
            if draws.force_reasoning_end:
                draws.budget.force()
        return chain

    def draw(self, run: Running, prompt: list[int]) -> tuple[int, TokenProbs | None]:
        """The token drawn from run.logits (and accepted by the samplers), with its probabilities if asked."""
        req, draws = run.request, run.draws
        if draws.greedy is None:
            self._settle(draws, req)
        if draws.greedy or req.sampling is None:
            return self.backend.greedy(run.logits, draws.banned), None
        chain = draws.chain or self._build_chain(run, req.sampling, prompt)
        logits = self.backend.to_numpy(run.logits)
        lazy = req.grammar is not None and req.grammar.lazy
        grammar = draws.grammar if grammar_should_apply(draws.grammar is not None, draws.budget, lazy) else None
        try:
            token = sample_constrained(chain, grammar, draws.budget.apply(logits) if draws.budget else logits)
        except GrammarDeadEnd as dead:
            raise DrawFailed(
                "got exception: Unexpected empty grammar stack after accepting piece: "
                f"{self.piece(dead.token, True).decode('utf-8', 'replace')} ({dead.token})"
            ) from None
        accept_generated(token, draws.budget, draws.grammar, lazy)
        chain.accept(token)
        if req.n_probs <= 0:
            return token, None
        prob, top = (
            chain.post_probs(token, req.n_probs) if req.post_sampling_probs else pre_probs(logits, token, req.n_probs)
        )
        return token, TokenProbs(prob, tuple(top))
