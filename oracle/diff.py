"""Diffs of two exchanges: byte-level first (after normalization), then structural, per SSE frame too."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from .exchange import Exchange
from .normalize import Approx, is_mask, masked_bytes, normalize, normalize_text


@dataclass(frozen=True)
class Divergence:
    path: str
    kind: str  # status | content-type | bytes | missing | extra | order | type | value | number-format | frames
    # | tolerance (a number a rule compares within a tolerance is off by more)
    reference: Any = None
    mlxcel: Any = None

    def __post_init__(self) -> None:  # the values as JSON: a number compared within a tolerance as itself
        object.__setattr__(self, "reference", _plain(self.reference))
        object.__setattr__(self, "mlxcel", _plain(self.mlxcel))

    def describe(self, left: str = "reference", right: str = "mlxcel") -> str:
        """The difference in words; `left`/`right` name the two sides (a drift check compares the recording,
        left, with the live reference, right)."""
        if self.kind == "missing":
            return f"{self.path}: missing in {right} ({left} has {_short(self.reference)})"
        if self.kind == "extra":
            return f"{self.path}: only in {right} ({_short(self.mlxcel)})"
        return f"{self.path}: {self.kind} differs: {left} {_short(self.reference)} vs {right} {_short(self.mlxcel)}"

    def describe_drift(self) -> str:
        """The difference between a recording (the diff's left side) and the live reference (its right)."""
        return self.describe("recorded", "live reference")


@dataclass
class DiffReport:
    divergences: list[Divergence] = field(default_factory=list)
    bytes_identical: bool = True
    normalizations_fired: list[str] = field(default_factory=list)
    judged: dict | None = None  # a judged case (oracle/judge.py): its decided-position figures

    @property
    def identical(self) -> bool:
        """As the reference within the case's rule: bytes and structure, or a judged case's decided positions."""
        return not self.divergences if self.judged is not None else self.bytes_identical and not self.divergences

    def to_dict(self) -> dict:
        out = {
            "identical": self.identical,
            "bytes_identical": self.bytes_identical,
            "normalizations_fired": self.normalizations_fired,
            "divergences": [asdict(d) for d in self.divergences],
        }
        return out if self.judged is None else {**out, "judged": self.judged}


def _plain(v: Any) -> Any:
    if isinstance(v, Approx):
        return v.value
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return [_plain(x) for x in v] if isinstance(v, list) else v


def _short(v: Any, n: int = 120) -> str:
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= n else s[: n - 3] + "..."


def _json_type(v: Any) -> str:
    if is_mask(v):
        return "masked"
    if isinstance(v, Approx):
        return "number"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string", type(None): "null"}.get(type(v), type(v).__name__)


def diff_values(ref: Any, got: Any, path: str = "$") -> list[Divergence]:  # noqa: C901
    if _json_type(ref) != _json_type(got):
        return [Divergence(path, "type", ref, got)]
    if _json_type(ref) == "masked":  # both masked: compare the recorded JSON types
        return [] if ref == got else [Divergence(path, "type", ref[1], got[1])]
    if isinstance(ref, Approx) and isinstance(got, Approx):
        within = abs(ref.value - got.value) <= ref.tolerance
        return [] if within else [Divergence(path, "tolerance", ref.value, got.value)]
    if isinstance(ref, dict):
        out = [Divergence(f"{path}.{k}", "missing", reference=ref[k]) for k in ref if k not in got]
        out += [Divergence(f"{path}.{k}", "extra", mlxcel=got[k]) for k in got if k not in ref]
        common_ref = [k for k in ref if k in got]
        common_got = [k for k in got if k in ref]
        if common_ref != common_got:
            out.append(Divergence(path, "order", common_ref, common_got))
        for k in common_ref:
            out.extend(diff_values(ref[k], got[k], f"{path}.{k}"))
        return out
    if isinstance(ref, list):
        if len(ref) != len(got):
            return [Divergence(path, "value", ref, got)]
        return [d for i, (a, b) in enumerate(zip(ref, got, strict=False)) for d in diff_values(a, b, f"{path}[{i}]")]
    if ref != got:
        return [Divergence(path, "value", ref, got)]
    if isinstance(ref, float) != isinstance(got, float):  # 1 and 1.0 are different bytes on the wire
        return [Divergence(path, "number-format", ref, got)]
    return []


def _body_layers(
    ref_body: bytes, got_body: bytes, names: tuple[str, ...], fired: set[str], where: str
) -> tuple[bool, list[Divergence]]:
    """(bytes identical after normalization, structural divergences) for one body or frame."""
    try:
        a, b = json.loads(ref_body), json.loads(got_body)
    except ValueError:
        ref_body, got_body = normalize_text(ref_body, names, fired), normalize_text(got_body, names, fired)
        same = ref_body == got_body
        return same, [] if same else [
            Divergence(where, "bytes", ref_body[:200].decode(errors="replace"), got_body[:200].decode(errors="replace"))
        ]
    na, nb = normalize(a, names, fired), normalize(b, names, fired)
    # the wire bytes must agree outside what the rules masked (escaping and float spelling included)
    same = masked_bytes(ref_body, a, na, names) == masked_bytes(got_body, b, nb, names)
    structural = diff_values(na, nb, where)
    if not same and not structural:
        structural = [
            Divergence(where, "bytes", ref_body[:200].decode(errors="replace"), got_body[:200].decode(errors="replace"))
        ]
    return same, structural


def _event_line(frame: bytes) -> tuple[bytes, bytes]:
    """(the "event: name" line or b"", the rest of the frame)."""
    if frame.startswith(b"event: ") and b"\n" in frame:
        head, rest = frame.split(b"\n", 1)
        return head, rest
    return b"", frame


def diff_exchanges(ref: Exchange, got: Exchange, names: tuple[str, ...] = ()) -> DiffReport:  # noqa: C901
    report = DiffReport()
    fired: set[str] = set()
    if ref.status != got.status:
        report.divergences.append(Divergence("status", "status", ref.status, got.status))
    if ref.headers.get("content-type") != got.headers.get("content-type"):
        report.divergences.append(
            Divergence(
                "header content-type", "content-type", ref.headers.get("content-type"), got.headers.get("content-type")
            )
        )
    theirs = dict(got.compared)
    for name, value in ref.compared:  # the headers the case asked to compare (CORS, auth)
        if theirs.get(name) != value:
            report.divergences.append(Divergence(f"header {name}", "header", value, theirs.get(name)))
    spelled = dict(got.spelled)
    for name, spelling in ref.spelled:  # the headers whose presence and spelling the case compares
        if spelled.get(name) != spelling:
            report.divergences.append(Divergence(f"header {name}", "header name", spelling, spelled.get(name)))
    if ref.frames or got.frames:
        if len(ref.frames) != len(got.frames):
            report.divergences.append(Divergence("frames", "frames", len(ref.frames), len(got.frames)))
        for i, (a, b) in enumerate(zip(ref.frames, got.frames, strict=False)):
            (ev_a, a), (ev_b, b) = _event_line(a), _event_line(b)
            if ev_a != ev_b:  # an Anthropic stream names each event before its data
                report.divergences.append(
                    Divergence(
                        f"frame[{i}] event", "value", ev_a.decode(errors="replace"), ev_b.decode(errors="replace")
                    )
                )
            same, divs = _body_layers(
                a.removeprefix(b"data: "), b.removeprefix(b"data: "), names, fired, f"frame[{i}]$"
            )
            report.bytes_identical &= same and a[:6] == b[:6] and ev_a == ev_b
            report.divergences.extend(divs)
        report.bytes_identical &= len(ref.frames) == len(got.frames)
    else:
        same, divs = _body_layers(ref.body, got.body, names, fired, "$")
        report.bytes_identical = same
        report.divergences.extend(divs)
    report.bytes_identical &= ref.status == got.status
    report.normalizations_fired = sorted(fired)
    return report
