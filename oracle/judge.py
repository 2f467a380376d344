"""The decided-position rule for a generating corpus case (its "judge"): the generated tokens compared position by
position; where the reference picked its top-1 and that log-probability beats its top-2 by more than the twin's
threshold (oracle/trace.py THRESHOLDS) the position is decided and mlxcel must pick the same token; at the first position
where the two differ and the reference had not decided, the paths part and the comparison stops (agreed so far).

A judged case asks for n_probs (or logprobs with top_logprobs) >= 2, so that every generated token carries the
reference's margin; the tokens are read from /completion's completion_probabilities or the chat choices' logprobs,
streamed or not.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from .diff import DiffReport, Divergence, diff_exchanges
from .exchange import Exchange
from .trace import THRESHOLDS

GROUPS = ("greedy", "seeded", "streamed", "chat", "grammar")


@dataclass(frozen=True)
class Judgement:
    group: str
    threshold: float
    generated: int  # tokens the reference generated
    compared: int  # positions compared: all, or up to and including the first divergence
    agreed: int  # positions where both picked the same token
    decided: int  # decided positions among those compared
    disagreements_at_decided: int  # 0 or 1: the comparison stops at the first divergence
    parted_at: int | None  # the first position where the tokens differ (None: the same path throughout)

    def to_dict(self) -> dict:
        return asdict(self)


def generated_tokens(exchange: Exchange) -> list[tuple[int, list[tuple[int, float]]]]:
    """(token id, the top (id, log-probability) pairs best first) per generated token."""
    docs = []
    if exchange.frames:
        for frame in exchange.frames:
            data = frame.removeprefix(b"data: ")
            if data.startswith(b"{"):
                docs.append(json.loads(data))
    elif exchange.status == 200:
        docs.append(json.loads(exchange.body))
    out = []
    for doc in docs:
        items = list(doc.get("completion_probabilities") or [])
        for choice in doc.get("choices") or []:
            items += (choice.get("logprobs") or {}).get("content") or []
        out += [(item["id"], [(t["id"], t["logprob"]) for t in item.get("top_logprobs", [])]) for item in items]
    return out


def judge(ref: Exchange, mine: Exchange, group: str, twin: str) -> tuple[Judgement, list[Divergence]]:
    threshold = THRESHOLDS[twin]
    theirs, ours = generated_tokens(ref), generated_tokens(mine)
    agreed = decided = 0
    parted_at, disagreement = None, []
    for i in range(max(len(theirs), len(ours))):
        # the reference's margin decides a position only where it picked its raw top-1 (a grammar or a sampler
        # that chose otherwise leaves the margin among its candidates unknown); a position the reference did not
        # reach (it stopped) was its own choice, counted as decided
        if i < len(theirs):
            chosen, top = theirs[i]
            is_decided = len(top) < 2 or (top[0][0] == chosen and top[0][1] - top[1][1] > threshold)
        else:
            is_decided = True
        decided += is_decided
        ref_id = theirs[i][0] if i < len(theirs) else None
        my_id = ours[i][0] if i < len(ours) else None
        if ref_id == my_id:
            agreed += 1
            continue
        parted_at = i
        if is_decided:
            disagreement = [Divergence(f"$.generated[{i}]", "decided", ref_id, my_id)]
        break
    compared = agreed + (parted_at is not None)
    return (
        Judgement(group, threshold, len(theirs), compared, agreed, decided, len(disagreement), parted_at),
        disagreement,
    )


def judged_report(ref: Exchange, mine: Exchange, group: str, twin: str, names: tuple[str, ...]) -> DiffReport:
    """A judged case's report: the status and content type exactly, the generated tokens by the rule (whether the
    bytes agree too is kept, for information)."""
    report = DiffReport(bytes_identical=diff_exchanges(ref, mine, names).bytes_identical)
    if ref.status != mine.status:
        report.divergences.append(Divergence("status", "status", ref.status, mine.status))
    if ref.headers.get("content-type") != mine.headers.get("content-type"):
        report.divergences.append(
            Divergence(
                "header content-type", "content-type", ref.headers.get("content-type"), mine.headers.get("content-type")
            )
        )
    judgement, divergences = judge(ref, mine, group, twin)
    report.divergences.extend(divergences)
    if not judgement.generated:
        report.divergences.append(Divergence("$.generated", "missing", "tokens with their probabilities", None))
    report.judged = judgement.to_dict()
    return report
