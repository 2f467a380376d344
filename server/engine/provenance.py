"""How each position of a KV state was computed, and how far a prompt can resume from it bit-identically.

On the CPU a position's keys and values depend on how its row was computed only through the kind of product
that computed it: a prompt chunk of more than `few` rows (the BLAS's GEMM), of `few` rows or fewer (mlxcel's
few-row kernels), or a decode step. Within one kind a row's sums do not depend on the other rows (the BLAS's
row-stable kernels, cpu_kernels.c; tests/test_prompt_cache_exact.py measures it). A cold run cuts a prompt into
chunks ending on multiples of the ubatch, so it computes position i by the kind its chunk's size gives. A hit
that reuses b10621's n_past is bitwise a cold run when the reused positions were computed by the kinds the
cold run uses and its first recomputed chunk is of the kind the cold run's chunk there is; `exact_start` gives
the largest resume point that keeps both, at most n_past. The positions between it and n_past are recomputed:
the cost of keeping a hit equal to a cold run (docs/prompt-cache.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

GEMM, FEW, DECODE = "gemm", "few", "decode"


def chunk_kind(rows: int, few: int) -> str:
    return GEMM if rows > few else FEW


@dataclass
class Provenance:
    """Runs of positions, (start, end, kind), in order from position 0."""

    runs: list[tuple[int, int, str]] = field(default_factory=list)

    def add(self, start: int, end: int, kind: str) -> None:
        self.truncate(start)
        if end <= start:
            return
        if self.runs and self.runs[-1][1] == start and self.runs[-1][2] == kind:
            self.runs[-1] = (self.runs[-1][0], end, kind)
        else:
            self.runs.append((start, end, kind))

    def truncate(self, n: int) -> None:
        """Forget positions from n on."""
        self.runs = [(a, min(b, n), k) for a, b, k in self.runs if a < n]

    def copy(self) -> "Provenance":
        return Provenance(list(self.runs))

    @property
    def n(self) -> int:
        return self.runs[-1][1] if self.runs else 0


def cold_kind(i: int, n_prompt: int, ubatch: int, few: int) -> str:
    """The kind a cold run of an n_prompt-token prompt computes position i by."""
    start = i // ubatch * ubatch
    return chunk_kind(min(n_prompt, start + ubatch) - start, few)


def exact_start(made: Provenance | None, n_prompt: int, n_past: int, ubatch: int, few: int) -> int:
    """The largest resume point <= n_past from which a prompt of n_prompt tokens computes bitwise what a cold
    run computes, given how the held positions were made (None: not as any cold run makes them, after a context
    shift or moved chunks: 0, everything recomputed)."""
    if made is None or n_past <= 0:
        return 0
    s = 0
    for a, b, kind in made.runs:  # the held positions that agree with the cold run's kinds
        if a >= n_past:
            break
        if kind == DECODE:
            break
        # within a run of one kind, the cold run's kind changes only at chunk boundaries
        i, stop = a, min(b, n_past)
        while i < stop and cold_kind(i, n_prompt, ubatch, few) == kind:
            i = min(stop, (i // ubatch + 1) * ubatch)
        s = i
        if i < stop:
            break
    # the first recomputed chunk [s, e) must be of the kind the cold run's chunk there is
    e = min(n_prompt, (s // ubatch + 1) * ubatch)
    if cold_kind(s, n_prompt, ubatch, few) == GEMM and e - s <= few:
        s = max(s // ubatch * ubatch, e - few - 1)
    return s
