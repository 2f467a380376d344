"""The startup differential: one b10621 command line run on both binaries, and what a user sees compared.

A case (fixtures/startup/*.json) is a command line and environment given to both. Each side is observed
the same way: does it serve (it answered /health without 503) or exit (with which status); once serving,
the probe request's exchange; for a case that names them, the files it leaves (a log file's existence,
mode, emptiness) and its printed output. The two observations are diffed like exchanges, and mlxcel's
refusal diagnostic is pinned per case (`mlxcel_says`).

Placeholders in args and env: {port} (a free port per side), {tmp} (the side's own working directory),
{certs} (a self-signed test certificate and key, made by the test),
{gguf} (the twin's GGUF, which both sides are given verbatim), {repo}, {sock} ({tmp}/server.sock),
{draft_q4_1} and {draft_f32} (a twin's GGUF as a draft model),
{mmproj} (a projector b10621 loads, fixtures/projector.py), {mmproj_idefics3} (the same tower as a projector
type b10621 serves and mlxcel refuses), {damaged} (the directory of damaged GGUF copies).
Unless a case says otherwise, "-m MODEL --alias NAME --host 127.0.0.1 --port {port}" comes first: the reference's
MODEL is the twin's GGUF, mlxcel's its MLX checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import ssl
import stat
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from . import loopback
from .corpus import REPO_ROOT
from .diff import DiffReport, Divergence, diff_exchanges, diff_values
from .exchange import Exchange, OracleRequest
from .normalize import REGISTRY
from .transcripts import marked, unmarked

STARTUP_DIR = REPO_ROOT / "fixtures" / "startup"
STARTUP_TRANSCRIPTS = REPO_ROOT / "fixtures" / "transcripts" / "startup"
DEFAULT_PROBE = {
    "method": "POST",
    "path": "/completion",
    "body": {"prompt": "The capital of France is", "n_predict": 4, "temperature": 0},
}
DEFAULT_NORMALIZE = ("clocks", "id_slot")
# what a side prints when it is listening (b10621: "server is listening on URL", mlxcel: "listening on URL")
_LISTENING = re.compile(r"listening on ((?:https?|unix)://\S+?)(?: |$)", re.MULTILINE)


LOG_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [DIWE] ")  # mlxcel's and b10621's log lines: clock, level


@dataclass(frozen=True)
class StartupCase:
    name: str
    entries: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    twin: str = "q4_1"
    model: bool = True  # "-m MODEL" first
    listen: bool = True  # "--host 127.0.0.1 --port {port}" next
    probe: OracleRequest | None = None  # sent once serving; None: no probe
    headers: tuple[tuple[str, str], ...] = ()
    normalize: tuple[str, ...] = DEFAULT_NORMALIZE
    observe: tuple[str, ...] = ()  # "stdout", "output-empty", "file:{tmp}/NAME", "ansi", "line-shape", "match:RE"
    expect_identical: bool = True
    expect_divergences: tuple[tuple[str, str], ...] = ()
    mlxcel_says: str | None = None  # a line mlxcel prints (its refusal diagnostic), pinned
    timeout: float = 60.0

    @property
    def path(self) -> Path:
        return STARTUP_DIR / f"{self.name}.json"

    def reproduce(self) -> str:
        return f"pytest conformance/test_startup.py -k {self.name}"

    def fingerprint(self) -> str:
        """What the reference's recorded observation depends on: a change re-records it."""
        probe = self.probe and [self.probe.method, self.probe.path, self.probe.sha256()]
        return json.dumps([self.args, self.env, self.twin, self.model, self.listen, probe, self.observe])


def load_startup_case(path: Path) -> StartupCase:
    data = json.loads(path.read_text(encoding="utf-8"))
    unknown = [n for n in data.get("normalize", []) if n not in REGISTRY]
    if unknown:
        raise ValueError(f"{path.name}: unknown normalization(s) {unknown}")
    expect = data.get("expect", {"identical": True})
    probe = data.get("probe", DEFAULT_PROBE)
    return StartupCase(
        name=path.stem,
        entries=tuple(data["entries"]),
        args=tuple(data.get("args", ())),
        env=tuple((data.get("env") or {}).items()),
        twin=data.get("twin", "q4_1"),
        model=data.get("model", True),
        listen=data.get("listen", True),
        probe=OracleRequest.from_dict(probe) if probe else None,
        normalize=tuple(data.get("normalize", DEFAULT_NORMALIZE)),
        observe=tuple(data.get("observe", ())),
        expect_identical=bool(expect.get("identical", True)),
        expect_divergences=tuple(tuple(d) for d in expect.get("divergences", [])),
        mlxcel_says=data.get("mlxcel_says"),
        timeout=float(data.get("timeout", 60)),
    )


def load_startup_cases(directory: Path = STARTUP_DIR) -> list[StartupCase]:
    return [load_startup_case(p) for p in sorted(directory.glob("*.json"))]


# --- one side ------------------------------------------------------------------------------------------------


@dataclass
class Observation:
    outcome: str  # "serves" | "exits" | "hangs"
    exit_status: int | None = None
    probe: Exchange | None = None
    files: dict[str, Any] = field(default_factory=dict)
    output: dict[str, Any] = field(default_factory=dict)  # the observed properties of what it printed
    said: str = ""  # its last printed lines (shown in reports, never compared)
    values: dict[str, str] = field(default_factory=dict)  # the placeholders' values on this side (not recorded)

    def lines(self) -> list[str]:
        """What this side printed, line by line, each log line also without its clock and level (a pin names the
        sentence, not when it was said)."""
        said = self.said.splitlines()
        return said + [LOG_PREFIX.sub("", ln) for ln in said if LOG_PREFIX.match(ln)]

    def pinned(self, text: str) -> str:
        """A pinned line with this side's placeholder values filled in."""
        return _substitute(text, self.values)

    def unpinned(self, text: str) -> str:
        """A printed line with this side's values put back as placeholders (longest first)."""
        for key, value in sorted(self.values.items(), key=lambda kv: -len(kv[1])):
            if value:
                text = text.replace(value, "{" + key + "}")
        return text

    def to_record(self) -> dict:
        return {
            "outcome": self.outcome,
            "exit_status": self.exit_status,
            "probe": self.probe.to_record() if self.probe else None,
            "files": self.files,
            "output": self.output,
            "said": self.said,
        }

    @classmethod
    def from_record(cls, rec: dict) -> Observation:
        return cls(
            rec["outcome"],
            rec["exit_status"],
            Exchange.from_record(rec["probe"]) if rec["probe"] else None,
            rec["files"],
            rec["output"],
            rec.get("said", ""),
        )


@dataclass(frozen=True)
class Side:
    name: str  # "reference" | "mlxcel"
    program: tuple[str, ...]
    model: tuple[str, ...]  # "-m MODEL --alias NAME"
    gguf: Path
    env: dict[str, str]


def _free_port() -> int:
    from .processes import free_port

    return free_port()


def _substitute(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def _client(url: str, timeout: float) -> tuple[httpx.Client, str]:
    if url.startswith("unix://"):
        return httpx.Client(transport=httpx.HTTPTransport(uds=url[len("unix://") :]), timeout=timeout), "http://local"
    verify: Any = loopback.tls_context()  # plain http: httpx's own would load the CA bundle each case
    if url.startswith("https://"):
        verify = ssl.create_default_context()
        verify.check_hostname = False
        verify.verify_mode = ssl.CERT_NONE  # the case's own self-signed certificate
    return httpx.Client(verify=verify, timeout=timeout), url


def _ready(url: str, headers: dict[str, str]) -> bool:
    client, base = _client(url, 2.0)
    with client:
        try:
            return client.get(base + "/health", headers=headers).status_code != 503
        except httpx.HTTPError:
            return False


def _probe(url: str, request: OracleRequest) -> Exchange:
    client, base = _client(url, 120.0)
    with client:
        headers = {"Content-Type": "application/json"} if request.body_bytes() is not None else {}
        headers.update(request.headers)
        r = client.request(request.method, base + request.path, content=request.body_bytes(), headers=headers)
    hdrs = {k.lower(): v for k, v in r.headers.items()}
    compared = tuple((name, hdrs.get(name)) for name in request.compare_headers)
    return Exchange(status=r.status_code, headers=hdrs, body=r.content, compared=compared)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# b10621's line prefix: an elapsed-time stamp "0.00.039.303 " and a level letter "I "
_STAMP = re.compile(r"^\d+\.\d{2}\.\d{3}\.\d{3} ")
_LEVEL = re.compile(r"^(?:\d+\.\d{2}\.\d{3}\.\d{3} )?[IWED] ")


def _output_properties(text: str, observe: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    lines = [_ANSI.sub("", ln) for ln in text.splitlines() if ln.strip()]
    if "output-empty" in observe:
        out["empty"] = not lines
    if "ansi" in observe:
        out["ansi"] = bool(_ANSI.search(text))
    for item in observe:  # "match:REGEX": whether what it printed matches (multiline)
        if item.startswith("match:"):
            out[item] = bool(re.search(item[len("match:") :], "\n".join(lines), re.MULTILINE))
    if "line-shape" in observe:
        out["timestamps"] = bool(lines) and all(_STAMP.match(ln) for ln in lines)
        out["level_tags"] = bool(lines) and all(_LEVEL.match(ln) for ln in lines)
    return out


def _file_properties(path: Path, observe: tuple[str, ...]) -> dict[str, Any]:
    if not path.exists():
        return {"exists": False}
    st = path.lstat()
    props: dict[str, Any] = {"exists": True, "regular": stat.S_ISREG(st.st_mode), "mode": oct(st.st_mode & 0o777)}
    if stat.S_ISREG(st.st_mode):
        text = path.read_text(errors="replace")
        props["empty"] = not text.strip()
        props.update({f"content.{k}": v for k, v in _output_properties(text, observe).items()})
    return props


_FIXTURES = threading.Lock()
# A startup case is mostly one process starting (~2 s of one core, imports and loading under the GIL), so the
# next case's mlxcel side starts on the second core while this one runs (observe_ahead): ~1.9x over the suite.
_AHEAD: dict[str, Future[Observation]] = {}
_AHEAD_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="startup-ahead")  # this case and the next


def observe_ahead(case: StartupCase, extra: dict[str, str] | None = None) -> None:
    """Start observing the case's mlxcel side now, in the background; run_startup_case takes the result.
    The observation is the same as in turn: each case has its own port, scratch directory and HOME."""
    key = case.fingerprint()
    if key not in _AHEAD:
        _, mine = sides(case, None)
        _AHEAD[key] = _AHEAD_POOL.submit(observe, case, mine, extra)


def _values(case: StartupCase, side: Side, workdir: Path, extra: dict[str, str] | None) -> dict[str, str]:
    """The case's placeholders, building the fixtures it names (cached on disk)."""
    values = {
        **(extra or {}),
        "port": str(_free_port()),
        "tmp": str(workdir),
        "gguf": str(side.gguf),
        "repo": str(REPO_ROOT),
        "sock": str(workdir / "server.sock"),
    }
    if any("{lora_gguf}" in a for a in case.args):  # the seeded GGUF LoRA (fixtures/lora.py), read by both
        from fixtures.lora import lora_gguf

        values["lora_gguf"] = str(lora_gguf())
    if any("{mmproj}" in a for a in case.args):  # a real projector: b10621 loads it (fixtures/projector.py)
        from fixtures.projector import projector_gguf

        values["mmproj"] = str(projector_gguf())
    if any("{mmproj_idefics3}" in a for a in case.args):
        from fixtures.projector import projector_gguf

        values["mmproj_idefics3"] = str(projector_gguf("idefics3"))
    if any("{control_vector}" in a for a in case.args):
        from fixtures.control_vector import control_vector_gguf

        values["control_vector"] = str(control_vector_gguf())
    if any("{damaged}" in a for a in case.args):  # damaged copies of the Q4_1 GGUF (fixtures/damaged_gguf.py)
        from fixtures.damaged_gguf import damaged_dir

        values["damaged"] = str(damaged_dir())
    if any("{draft_" in a for a in case.args):  # a twin's GGUF as a draft model, read by both
        from fixtures.twins import twin

        values |= {"draft_q4_1": str(twin("q4_1").gguf), "draft_f32": str(twin("f32").gguf)}
    return values


def observe(case: StartupCase, side: Side, extra: dict[str, str] | None = None) -> Observation:
    """Run the case's command line on one side and observe it; the process is always stopped."""
    workdir = Path(tempfile.mkdtemp(prefix=f"mlxcel-startup-{side.name}-"))
    try:
        with _FIXTURES:  # (a case observed ahead builds its fixtures on another thread)
            values = _values(case, side, workdir, extra)
        argv = [*side.program, *(side.model if case.model else ())]
        if case.listen:
            argv += ["--host", "127.0.0.1", "--port", values["port"]]
        argv += [_substitute(a, values) for a in case.args]
        env = dict(side.env)
        env["HOME"] = str(workdir)
        env.update({k: _substitute(v, values) for k, v in case.env})
        out_path, err_path = workdir / "stdout.txt", workdir / "stderr.txt"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=workdir, stdin=subprocess.DEVNULL)
            try:
                obs = _watch(case, proc, out_path, err_path, values)
            finally:
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
        printed = out_path.read_text(errors="replace") + err_path.read_text(errors="replace")
        obs.said = "\n".join(ln for ln in printed.splitlines() if ln.strip())[-4000:]
        obs.values = values
        if "stdout" in case.observe:
            obs.output["stdout"] = out_path.read_text(errors="replace")
        obs.output.update(_output_properties(printed, case.observe))
        for item in case.observe:
            if item.startswith("file:"):
                rel = _substitute(item[len("file:") :], values)
                obs.files[item[len("file:") :]] = _file_properties(Path(rel), case.observe)
        return obs
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _watch(
    case: StartupCase, proc: subprocess.Popen, out_path: Path, err_path: Path, values: dict[str, str]
) -> Observation:
    deadline = time.monotonic() + case.timeout
    default_url = f"http://127.0.0.1:{values['port']}" if case.listen else None
    headers = dict(case.headers)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return Observation("exits", proc.returncode)
        # where it says it listens (TLS, a socket, port 0); a side that logs nothing is asked where it was told
        found = _LISTENING.findall(out_path.read_text(errors="replace") + err_path.read_text(errors="replace"))
        url = found[-1] if found else default_url
        if url and _ready(url, headers):
            return Observation("serves", None, _probe(url, case.probe) if case.probe else None)
        time.sleep(0.1)
    return Observation("hangs")


# --- both sides, compared --------------------------------------------------------------------------------------


def _under(prefix: str, path: str) -> str:
    """An exchange diff's path ("$.a", "$", "status", "header x") under the observation's own prefix."""
    return prefix + path[1:] if path.startswith("$") else f"{prefix} {path}"


def diff_observations(ref: Observation, mine: Observation, normalize: tuple[str, ...]) -> DiffReport:
    report = DiffReport()
    for key in ("outcome", "exit_status"):
        a, b = getattr(ref, key), getattr(mine, key)
        if a != b:
            report.divergences.append(Divergence(f"$startup.{key}", "value", a, b))
    if ref.probe is not None and mine.probe is not None:
        probe = diff_exchanges(ref.probe, mine.probe, normalize)
        report.bytes_identical = probe.bytes_identical
        report.normalizations_fired = probe.normalizations_fired
        report.divergences += [
            Divergence(_under("$probe", d.path), d.kind, d.reference, d.mlxcel) for d in probe.divergences
        ]
    for key in ("files", "output"):
        report.divergences += [
            Divergence(_under(f"$startup.{key}", d.path), d.kind, d.reference, d.mlxcel)
            for d in diff_values(getattr(ref, key), getattr(mine, key))
        ]
    return report


def _transcript(name: str) -> Path:
    return STARTUP_TRANSCRIPTS / f"{name}.json"


def is_recorded(case: StartupCase) -> bool:
    """A recording exists for this very case (its fingerprint unchanged)."""
    try:
        return json.loads(_transcript(case.name).read_text(encoding="utf-8"))["fingerprint"] == case.fingerprint()
    except (OSError, ValueError, KeyError):
        return False


def recorded_reference(case: StartupCase) -> Observation:
    path = _transcript(case.name)
    if not path.is_file():
        raise LookupError(f"no recorded reference startup for {case.name}: run it once with the binary")
    doc = json.loads(unmarked(path.read_text(encoding="utf-8")))  # (the cache root: each machine's own)
    if doc["fingerprint"] != case.fingerprint():
        raise LookupError(f"{case.name}: the case changed since it was recorded: run it with the binary")
    return Observation.from_record(doc["reference"])


def record_reference(case: StartupCase, obs: Observation) -> None:
    STARTUP_TRANSCRIPTS.mkdir(parents=True, exist_ok=True)
    doc = {"case": case.name, "fingerprint": case.fingerprint(), "reference": obs.to_record()}
    _transcript(case.name).write_text(marked(json.dumps(doc, indent=1, ensure_ascii=False)) + "\n", encoding="utf-8")


def reference_live_or_recorded(case: StartupCase, live: Observation | None) -> tuple[Observation, str]:
    """A live observation is checked against the recording (the binary must not drift), or records it."""
    if live is None:
        return recorded_reference(case), "recorded"
    path = _transcript(case.name)
    if (
        os.environ.get("MLXCEL_ORACLE_RECORD") == "1"
        or not path.is_file()
        or json.loads(path.read_text(encoding="utf-8"))["fingerprint"] != case.fingerprint()
    ):
        record_reference(case, live)
        return live, "live"
    drift = diff_observations(recorded_reference(case), live, case.normalize)
    if not drift.identical:
        raise AssertionError(
            f"{case.name}: the reference no longer starts as recorded: "
            + "; ".join(d.describe_drift() for d in drift.divergences[:3])
        )
    return live, "live"


def sides(case: StartupCase, reference_binary: Path | None) -> tuple[Side | None, Side]:
    from fixtures.twins import twin

    from .processes import COMMON_ARGS, _clean_env

    t = twin(case.twin)
    home = Path(tempfile.gettempdir())
    mine_env = _clean_env(home)
    mine_env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    mine = Side("mlxcel", (sys.executable, "-m", "server"), ("-m", t.mlx_model, *COMMON_ARGS), t.gguf, mine_env)
    ref = (
        Side("reference", (str(reference_binary),), ("-m", str(t.gguf), *COMMON_ARGS), t.gguf, _clean_env(home))
        if reference_binary
        else None
    )
    return ref, mine


@dataclass
class StartupResult:
    case: StartupCase
    reference: Observation
    mlxcel: Observation
    report: DiffReport
    source: str

    def meets_expectation(self) -> tuple[bool, str]:
        from .runner import expectation_met

        return expectation_met(self.case, self.report)


def run_startup_case(
    case: StartupCase, reference_binary: Path | None, extra: dict[str, str] | None = None
) -> StartupResult:
    """reference_binary None: the recorded observation stands in for the reference. `extra`: more
    placeholders (a test certificate's directory)."""
    from .evidence import write_record

    ref_side, mine_side = sides(case, reference_binary)
    live: list[Observation] = []
    thread = None
    if ref_side is not None:  # both sides start at once: most of a case is waiting
        thread = threading.Thread(target=lambda: live.append(observe(case, ref_side, extra)))
        thread.start()
    ahead = _AHEAD.pop(case.fingerprint(), None)
    mine = ahead.result() if ahead is not None else observe(case, mine_side, extra)
    if thread is not None:
        thread.join()
    ref, source = reference_live_or_recorded(case, live[0] if live else None)
    report = diff_observations(ref, mine, case.normalize)
    write_record(
        {
            "case": f"startup-{case.name}",
            "entries": list(case.entries),
            "twin": case.twin,
            "request": {"method": "STARTUP", "path": " ".join(case.args), "sha256": None},
            "reference_sha256": None,
            "mlxcel_sha256": None,
            "reference_source": source,
            "reference_outcome": [ref.outcome, ref.exit_status],
            "mlxcel_outcome": [mine.outcome, mine.exit_status],
            **report.to_dict(),
            "reproduce": case.reproduce(),
        }
    )
    return StartupResult(case, ref, mine, report, source)
