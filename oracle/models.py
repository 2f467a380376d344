"""`mlxcel-oracle models`: every family twin (fixtures/families.py) in every format, served by b10621 and by mlxcel
on the same file and command line, measured into one JSON (reports/models/<date>-<commit>.json) from which
`python -m oracle.models_table` writes docs/models.md.

Per row: whether both load it; /tokenize on a fixed set of texts; the family's real template through
/apply-template; a 64-token greedy completion (F32 rows, pinned f32 KV, where identity is asked); logit traces
(F32: pinned f32 KV and b10621's defaults, 0.5-nat rule; quantized: defaults, 2.0-nat rule); resident memory of
both servers after loading, against the file's size. The shipped tokenizer test pairs of the family's vocabulary
are counted offline (the same check as tests/test_vocab_pairs.py).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import httpx

from . import loopback
from .processes import Pair, ServerProcess, ServerStartError
from .trace import trace

PROMPTS = ["Once upon a time, in a small village,", "def fibonacci(n):"]
TEXTS = ["Hello world", " multiple   spaces\n\ttabs", "ünïcödé 🦙 123456", "<|im_start|>user<|im_end|>"]
CONVERSATION = {
    "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]
}
F32_FORMATS = ("F32 GGUF", "F32 MLX")
REPORTS = Path(__file__).resolve().parent.parent / "reports" / "models"


def twin_kind(family: str, fmt: str) -> str:
    if fmt == "F32 GGUF":
        return f"f32_family_{family}"
    if fmt == "F32 MLX":
        return f"f32_family_{family}_mlx"
    return f"family_{family}_{fmt}"


def resident_mib(proc: ServerProcess) -> float | None:
    try:
        for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, AttributeError):
        pass
    return None


def _post(base: str, path: str, body: dict) -> httpx.Response:
    return loopback.post(base + path, json=body, timeout=300)


def _greedy(base: str, prompt: str) -> list[int]:
    body = {"prompt": prompt, "n_predict": 64, "temperature": 0, "ignore_eos": True, "return_tokens": True}
    return _post(base, "/completion", body).json()["tokens"]


def _traces(pair: Pair, rule: str) -> dict:
    ts = [trace(pair.reference.base_url, pair.mlxcel.base_url, p, rule, 32) for p in PROMPTS]
    return {
        "rule": rule,
        "decided": sum(t.decided for t in ts),
        "positions": sum(t.positions for t in ts),
        "disagreements_at_decided": sum(t.disagreements_at_decided for t in ts),
        "max_abs_delta_logprob": max(t.max_abs_delta_logprob for t in ts),
    }


def measure(family: str, fmt: str, binary: Path) -> dict:
    from fixtures.twins import twin

    kind = twin_kind(family, fmt)
    f32 = fmt in F32_FORMATS
    t = twin(kind)
    row: dict = {"family": family, "format": fmt, "gguf_mib": t.gguf.stat().st_size / 2**20}
    try:
        with Pair(kind, (), binary, pinned=f32) as pair:
            ref, mine = pair.reference.base_url, pair.mlxcel.base_url
            row["loads"] = True
            row["resident_mib"] = {"reference": resident_mib(pair.reference), "mlxcel": resident_mib(pair.mlxcel)}
            body = [{"content": x, "add_special": True, "parse_special": True} for x in TEXTS]
            row["tokenize_identical"] = sum(
                _post(ref, "/tokenize", b).json() == _post(mine, "/tokenize", b).json() for b in body
            )
            row["tokenize_cases"] = len(TEXTS)
            want, got = _post(ref, "/apply-template", CONVERSATION), _post(mine, "/apply-template", CONVERSATION)
            row["apply_template_identical"] = want.status_code == 200 and want.json() == got.json()
            if f32:
                row["greedy64_identical"] = sum(_greedy(ref, p) == _greedy(mine, p) for p in PROMPTS)
                row["greedy64_cases"] = len(PROMPTS)
            row["trace"] = _traces(pair, "f32" if f32 else "q4_1")
        if f32:
            with Pair(kind, (), binary, pinned=False) as pair:
                row["trace_defaults"] = _traces(pair, "f32")
    except ServerStartError as exc:
        row["loads"] = False
        row["error"] = str(exc).splitlines()[0][:300]
    return row


def run(formats: list[str], families: list[str] | None = None, out: Path | None = None) -> Path:
    from fixtures.families import FAMILIES, sdist_models
    from fixtures.vocab_pairs import passing_pairs

    from .reference import SDIST_SHA256, build_reference

    binary = build_reference()
    rows = []
    for family in families or sorted(FAMILIES):
        pairs = passing_pairs(sdist_models() / f"ggml-vocab-{FAMILIES[family].vocab}.gguf", SDIST_SHA256)
        for fmt in formats:
            row = measure(family, fmt, binary)
            row["vocab"] = FAMILIES[family].vocab
            row["vocab_pairs"] = pairs
            rows.append(row)
            print(json.dumps(row), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = {"date": dt.date.today().isoformat(), "commit": commit, "reference": str(binary.parent.name), "rows": rows}
    out = out or REPORTS / f"{report['date']}-{commit or 'unknown'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return out
