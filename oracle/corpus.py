"""The request corpus (fixtures/requests/*.json): one case per file, named by the entry it exercises.

A case: {"entries": [manifest ids], "twin": "q4_1"|"f32", "request": {method, path, body|raw_body},
"normalize": [rule names], "expect": {"identical": bool, "divergences": [[path, kind], ...]}}, optionally
"args": [server flags], whose cases get a server pair of their own (started fresh, run in name order), and
"setup": [requests] sent to both servers before the compared one (their answers are not compared), and
"judge": GROUP for a generating case judged by the decided-position rule (oracle/judge.py) instead of byte for
byte, and "fresh": true for a case whose answer depends on everything its server did since it started (counters, the
slot registry): it runs first on a pair of its own state, never after another case (`server_states`), and
"store": true for a router case whose servers start with a downloaded model in their stores (a state of its own).
`expect` pins what the oracle sees today, so a change in either direction fails until the case and the
manifest entry are flipped together.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from .exchange import OracleRequest
from .normalize import REGISTRY

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS_DIR = REPO_ROOT / "fixtures" / "requests"
TRANSCRIPT_DIR = REPO_ROOT / "fixtures" / "transcripts"


@dataclass(frozen=True)
class Case:
    name: str
    entries: tuple[str, ...]
    twin: str
    request: OracleRequest
    normalize: tuple[str, ...]
    expect_identical: bool
    expect_divergences: tuple[tuple[str, str], ...]
    args: tuple[str, ...] = ()
    setup: tuple[OracleRequest | float, ...] = ()
    fresh: bool = False
    store: bool = False  # router mode: each server's fresh store holds a downloaded model (fixtures/router.py)
    judge: str | None = None  # a generating case judged by the decided-position rule (oracle/judge.py): its group

    @property
    def path(self) -> Path:
        return CORPUS_DIR / f"{self.name}.json"

    def reproduce(self) -> str:
        return (
            f"mlxcel-oracle run --case {self.name}"
            if self.args or self.setup
            else f"mlxcel-oracle diff fixtures/requests/{self.name}.json --twin {self.twin}"
        )


# "{repo}" in a case's args: this checkout's root, so a file-taking flag names a committed fixture;
# "{templates}": the reference sdist's models/templates (real checkpoints' chat templates, never committed)
REPO_ROOT = Path(__file__).resolve().parents[1]


def _substitute(arg: str) -> str:
    arg = arg.replace("{repo}", str(REPO_ROOT))
    if "{templates}" in arg:
        from .reference import source_tree  # only a case that names a template fetches the sources

        arg = arg.replace("{templates}", str(source_tree() / "models" / "templates"))
    return arg


def load_case(path: Path) -> Case:
    data = json.loads(path.read_text(encoding="utf-8"))
    unknown = [n for n in data.get("normalize", []) if n not in REGISTRY]
    if unknown:
        raise ValueError(f"{path.name}: unknown normalization(s) {unknown}")
    expect = data.get("expect", {"identical": True})
    return Case(
        name=path.stem,
        entries=tuple(data["entries"]),
        twin=data.get("twin", "q4_1"),
        request=OracleRequest.from_dict(data["request"]),
        normalize=tuple(data.get("normalize", [])),
        expect_identical=bool(expect.get("identical", True)),
        expect_divergences=tuple(tuple(d) for d in expect.get("divergences", [])),
        args=tuple(_substitute(a) for a in data.get("args", [])),
        # a setup step {"wait_s": N} waits N seconds (idle-sleep cases), anything else is a request
        setup=tuple(float(r["wait_s"]) if "wait_s" in r else OracleRequest.from_dict(r) for r in data.get("setup", [])),
        fresh=bool(data.get("fresh", False)),
        store=bool(data.get("store", False)),
        judge=data.get("judge"),
    )


def load_corpus(directory: Path = CORPUS_DIR) -> list[Case]:
    return [load_case(p) for p in sorted(directory.glob("*.json"))]


SHARED = ""  # the server state of a case on its twin's shared pair (no flags of its own, not fresh)


def server_states(cases: list[Case]) -> list[tuple[str, list[Case]]]:
    """The server states the cases need, in run order, each with its cases in run order: the shared pairs'
    cases first (state SHARED), then one fresh pair per (twin, flags), its fresh case first and the others in
    name order; a second fresh case of the same flags gets a pair of its own."""
    shared = [c for c in cases if not c.args and not c.fresh and not c.store]
    out: list[tuple[str, list[Case]]] = [(SHARED, sorted(shared, key=lambda c: (c.twin, c.name)))] if shared else []
    groups: dict[str, list[Case]] = {}
    for c in sorted(
        (c for c in cases if c.args or c.fresh or c.store), key=lambda c: (c.twin, c.args, c.store, not c.fresh, c.name)
    ):
        key = f"{c.twin} {json.dumps(c.args)}" + (" store" if c.store else "")
        if c.fresh and key in groups:  # its flags' pair already served a case: this one needs its own
            key = f"{key} fresh:{c.name}"
        groups.setdefault(key, []).append(c)
    return out + list(groups.items())


# Routes whose successful answer reports what the server did since it started: counters and task ids (fresh pair
# only), or state a setup can set in full (adapter scales, a slot's tokens).
COUNTER_ROUTES = (("GET", "/slots"), ("GET", "/metrics"))
STATE_ROUTES = (("GET", "/lora-adapters"), ("POST", "/slots/"))


# the prompt-cache counts an answer reports (timings, /slots, OpenAI and Anthropic usage)
_CACHE_COUNT = re.compile(r'"(?:cache_n|n_prompt_tokens_cache|cached_tokens|cache_read_input_tokens)":\s*([1-9])')


def unstated_states(cases: list[Case], recorded) -> list[str]:
    """The own-server cases whose answer depends on the cases before them on their pair: a successful answer
    (recorded(case), the reference's recorded exchange, status < 400) of a counter route without "fresh": true,
    of a state route with neither "fresh" nor a setup, or one whose recorded prompt-cache counts come from an
    earlier case (not first on its pair, no setup). Such a case answers one thing in a full run and another
    run alone."""
    out = []
    later = {c.name for key, group in server_states(cases) if key != SHARED for c in group[1:]}
    for c in cases:
        rec = recorded(c)
        if not c.args or c.fresh or rec["status"] >= 400:
            continue
        text = (rec["body"].get("text") or "") + "".join(rec.get("frames", []))
        if c.name in later and not c.setup and _CACHE_COUNT.search(text):
            out.append(
                f"{c.name}: its recorded prompt-cache counts come from the cases before it: give it a setup "
                f'that caches what it needs, or "fresh": true'
            )
            continue
        method, path = c.request.method, c.request.path.split("?")[0]
        if any(method == m and path == p for m, p in COUNTER_ROUTES):
            out.append(
                f'{c.name}: {method} {path} reports counters of everything its server did: mark it "fresh": true'
            )
        elif not c.setup and any(method == m and path.startswith(p) for m, p in STATE_ROUTES):
            out.append(
                f"{c.name}: {method} {path} reports state the cases before it left: give it a setup that "
                f'sets that state, or "fresh": true'
            )
    return out
