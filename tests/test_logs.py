"""server.logs: b10621's log options, the redacting sinks, --log-file's refusals and modes, and the three
print-and-exit options (--version, --cache-list, --completion-bash: server/cli/introspect.py)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import require
from server.cli.introspect import cache_list_text, completion_bash, completion_spellings, version_text
from server.logs import (
    REDACTED,
    TRACE,
    VERBOSITY_INFINITE,
    B10621Formatter,
    LogConfig,
    LogConfigError,
    LogFileError,
    RedactingStream,
    Redactor,
    collect_secrets,
    configure_logging,
    open_log_file,
    parse_log_colors,
    python_level,
    record_verbosity,
    reset_logging,
    resolve_verbosity,
    tty_can_use_colors,
)
from server.models.store import cached_models

REPO = Path(__file__).resolve().parents[1]
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture
def logs(capsys):
    """Configure logging inside the test (pytest's capture stands in for stderr) and always take it down."""
    yield capsys
    reset_logging()


def _record(name: str, level: int, msg: str, created: float, exc_info=None) -> logging.LogRecord:
    rec = logging.LogRecord(name, level, __file__, 1, msg, None, exc_info)
    rec.created = created
    return rec


# --- line format ---------------------------------------------------------------------------------------------
# The expected lines below were recorded from the reference binary
# (/root/.cache/mlxcel/reference/b10621-487aea618a84/llama-server, b10621's common/ and tools/server/), run as
# `llama-server [--log-colors on] [--no-log-prefix|--no-log-timestamps] -m /nonexistent.gguf` and read with
# `cat -v`; the message text is replaced by our own where the logger name is part of the body.

T0 = 1_000_000.0
REF_INFO = "0.00.007.643 I srv  load_model: loading model 'x'\n"
REF_WARN_COLOR = "\x1b[34m0.00.004.877\x1b[0m \x1b[35mW srv  llama_server: -----------------\n\x1b[0m"
REF_INFO_COLOR = "\x1b[34m0.00.004.491\x1b[0m \x1b[32mI \x1b[0mcmn  common_param: verbosity = 3\n"
REF_WARN_COLOR_NO_PREFIX = "srv  llama_server: -----------------\n\x1b[0m"
REF_INFO_COLOR_NO_TS = "\x1b[32mI \x1b[0mcmn  common_param: verbosity = 3\n"


def test_line_format_matches_b10621():
    fmt = B10621Formatter(prefix=True, timestamps=True, colors=False, t_start=T0)
    assert fmt.format(_record("mlxcel", logging.INFO, "srv  load_model: loading model 'x'", T0 + 0.007643)) == REF_INFO
    assert fmt.format(_record("mlxcel", logging.WARNING, "w", T0 + 0.5)) == "0.00.500.000 W w\n"
    assert fmt.format(_record("mlxcel", logging.ERROR, "e", T0 + 61.000001)) == "1.01.000.001 E e\n"
    assert fmt.format(_record("mlxcel", logging.CRITICAL, "c", T0 + 1)) == "0.01.000.000 E c\n"
    assert fmt.format(_record("mlxcel", logging.DEBUG, "d", T0 + 1)) == "0.01.000.000 D d\n"
    # LOG_TRC prints with the I tag
    assert fmt.format(_record("mlxcel", TRACE, "t", T0 + 1)) == "0.01.000.000 I t\n"
    # minutes are not padded or wrapped
    assert fmt.format(_record("mlxcel", logging.INFO, "m", T0 + 7325.25)) == "122.05.250.000 I m\n"


def test_line_format_colors_and_switches_match_b10621():
    color = B10621Formatter(prefix=True, timestamps=True, colors=True, t_start=T0)
    assert (
        color.format(_record("mlxcel", logging.WARNING, "srv  llama_server: -----------------", T0 + 0.004877))
        == REF_WARN_COLOR
    )
    assert (
        color.format(_record("mlxcel", logging.INFO, "cmn  common_param: verbosity = 3", T0 + 0.004491))
        == REF_INFO_COLOR
    )
    no_prefix = B10621Formatter(prefix=False, timestamps=True, colors=True, t_start=T0)
    assert (
        no_prefix.format(_record("mlxcel", logging.WARNING, "srv  llama_server: -----------------", T0 + 1))
        == REF_WARN_COLOR_NO_PREFIX
    )
    no_ts = B10621Formatter(prefix=True, timestamps=False, colors=True, t_start=T0)
    assert (
        no_ts.format(_record("mlxcel", logging.INFO, "cmn  common_param: verbosity = 3", T0 + 1))
        == REF_INFO_COLOR_NO_TS
    )
    plain = B10621Formatter(prefix=False, timestamps=False, colors=False, t_start=T0)
    assert plain.format(_record("mlxcel", logging.ERROR, "srv  x: y", T0 + 1)) == "srv  x: y\n"


def test_body_names_the_logger_and_carries_the_traceback():
    fmt = B10621Formatter(prefix=True, timestamps=False, t_start=T0)
    assert fmt.format(_record("mlxcel.engine", logging.INFO, "slot 0", T0)) == "I engine: slot 0\n"
    assert fmt.format(_record("uvicorn.error", logging.WARNING, "x", T0)) == "W uvicorn.error: x\n"
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        out = fmt.format(_record("mlxcel", logging.ERROR, "failed", T0, exc_info=sys.exc_info()))
    assert out.startswith("E failed\nTraceback (most recent call last):\n")
    assert out.endswith("RuntimeError: boom\n")


# --- verbosity -----------------------------------------------------------------------------------------------


def test_verbosity_precedence():
    env = {"LLAMA_ARG_LOG_VERBOSITY": "1"}
    assert resolve_verbosity(True, 0, env) == VERBOSITY_INFINITE == 2**31 - 1  # -v beats -lv and the env
    assert resolve_verbosity(False, 4, env) == 4  # the command line beats the environment
    assert resolve_verbosity(False, None, env) == 1
    assert resolve_verbosity(False, None, {"LLAMA_ARG_LOG_VERBOSITY": " 4x"}) == 4  # std::stoi
    assert resolve_verbosity(False, None, {}) == 3
    with pytest.raises(LogConfigError) as exc:
        resolve_verbosity(False, None, {"LLAMA_ARG_LOG_VERBOSITY": "abc"})
    # b10621: error while handling environment variable "LLAMA_ARG_LOG_VERBOSITY": stoi
    assert str(exc.value) == 'error while handling environment variable "LLAMA_ARG_LOG_VERBOSITY": stoi'


def test_record_verbosity_mapping():
    # mlxcel's own loggers: LOG_ERR 1, LOG_WRN 2, LOG_INF 3, LOG_TRC 4, LOG_DBG 5
    assert [record_verbosity("mlxcel.api", lv) for lv in (50, 40, 30, 20, TRACE, 10, 5)] == [1, 1, 2, 3, 4, 5, 5]
    # everyone else's info is trace, as common_log_default_callback treats ggml/libllama's
    assert [record_verbosity("uvicorn.access", lv) for lv in (40, 30, 20, 10)] == [1, 2, 4, 5]
    assert record_verbosity("mlxcelerate", logging.INFO) == 4  # not under the mlxcel namespace


def test_python_level_mapping():
    own = [python_level(v, own=True) for v in (-1, 0, 1, 2, 3, 4, 5, VERBOSITY_INFINITE)]
    assert own[:2] == [own[0], own[0]] and own[0] > logging.CRITICAL
    assert own[2:] == [logging.ERROR, logging.WARNING, logging.INFO, TRACE, 1, 1]
    deps = [python_level(v, own=False) for v in (1, 2, 3, 4, 5, VERBOSITY_INFINITE)]
    assert deps == [logging.ERROR, logging.WARNING, logging.WARNING, TRACE, logging.DEBUG, logging.DEBUG]


def _emit_everything():
    for name in ("mlxcel", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.error("%s-error", name)
        lg.warning("%s-warn", name)
        lg.info("%s-info", name)
        lg.log(TRACE, "%s-trace", name)
        lg.debug("%s-debug", name)
        lg.log(5, "%s-five", name)


@pytest.mark.parametrize(
    "verbosity,expected",
    [
        (0, []),  # b10621 drops even errors at 0 (verified: -lv 0 with a missing model prints nothing)
        (1, ["mlxcel-error", "uvicorn.access-error"]),
        (2, ["mlxcel-error", "mlxcel-warn", "uvicorn.access-error", "uvicorn.access-warn"]),
        (3, ["mlxcel-error", "mlxcel-warn", "mlxcel-info", "uvicorn.access-error", "uvicorn.access-warn"]),
        (
            4,
            [
                "mlxcel-error",
                "mlxcel-warn",
                "mlxcel-info",
                "mlxcel-trace",
                "uvicorn.access-error",
                "uvicorn.access-warn",
                "uvicorn.access-info",
                "uvicorn.access-trace",
            ],
        ),
        (
            5,
            [
                "mlxcel-error",
                "mlxcel-warn",
                "mlxcel-info",
                "mlxcel-trace",
                "mlxcel-debug",
                "mlxcel-five",
                "uvicorn.access-error",
                "uvicorn.access-warn",
                "uvicorn.access-info",
                "uvicorn.access-trace",
                "uvicorn.access-debug",
            ],
        ),
        (
            VERBOSITY_INFINITE,
            [
                "mlxcel-error",
                "mlxcel-warn",
                "mlxcel-info",
                "mlxcel-trace",
                "mlxcel-debug",
                "mlxcel-five",
                "uvicorn.access-error",
                "uvicorn.access-warn",
                "uvicorn.access-info",
                "uvicorn.access-trace",
                "uvicorn.access-debug",
            ],
        ),
    ],
)
def test_threshold_filters_both_sinks(logs, tmp_path, verbosity, expected):
    path = tmp_path / "server.log"
    configure_logging(LogConfig(file=str(path), prefix=False, verbosity=verbosity))
    _emit_everything()
    reset_logging()
    shown = [line.split(": ", 1)[-1] for line in path.read_text().splitlines()]
    assert shown == expected
    err = [line.split(": ", 1)[-1] for line in logs.readouterr().err.splitlines()]
    assert err == expected


def test_log_disable_writes_nothing_anywhere(logs, tmp_path):
    path = tmp_path / "server.log"
    configure_logging(LogConfig(disable=True, file=str(path), verbosity=VERBOSITY_INFINITE))
    _emit_everything()
    logging.getLogger("elsewhere").critical("critical")
    reset_logging()
    assert logs.readouterr().err == ""
    assert not path.exists()  # no sink at all: the file is not even opened


# --- --log-colors --------------------------------------------------------------------------------------------


def test_log_colors_vocabulary():
    assert [parse_log_colors(v) for v in ("on", "enabled", "true", "1")] == ["on"] * 4
    assert [parse_log_colors(v) for v in ("off", "disabled", "false", "0")] == ["off"] * 4
    assert [parse_log_colors(v) for v in ("auto", "-1")] == ["auto"] * 2
    for bad in ("ON", "On", "yes", "", "2"):
        with pytest.raises(LogConfigError) as exc:
            parse_log_colors(bad)
        # b10621: error while handling argument "--log-colors": error: unknown value for --log-colors: 'ON'
        assert str(exc.value) == f"error: unknown value for --log-colors: '{bad}'"
    with pytest.raises(LogConfigError) as exc:
        LogConfig.from_args(SimpleNamespace(), {"LLAMA_ARG_LOG_COLORS": "On"})
    assert str(exc.value) == (
        'error while handling environment variable "LLAMA_ARG_LOG_COLORS": '
        "error: unknown value for --log-colors: 'On'"
    )


def test_tty_can_use_colors(monkeypatch):
    assert tty_can_use_colors({"NO_COLOR": "1"}) is False
    assert tty_can_use_colors({"TERM": "dumb"}) is False
    monkeypatch.setattr(os, "isatty", lambda fd: True)
    assert tty_can_use_colors({"NO_COLOR": ""}) is True


def test_colors_on_reach_both_sinks_auto_never_the_file(logs, tmp_path, monkeypatch):
    monkeypatch.setattr("server.logs.sink.tty_can_use_colors", lambda: True)
    path = tmp_path / "auto.log"
    configure_logging(LogConfig(file=str(path), colors="auto"))
    logging.getLogger("mlxcel").warning("hello")
    reset_logging()
    assert "\x1b[35mW " in logs.readouterr().err
    assert "\x1b" not in path.read_text()
    path = tmp_path / "on.log"
    configure_logging(LogConfig(file=str(path), colors="on"))
    logging.getLogger("mlxcel").warning("hello")
    reset_logging()
    assert "\x1b[35mW " in path.read_text()  # b10621 writes the escapes to its file too under 'on'
    assert "\x1b[35mW " in logs.readouterr().err
    configure_logging(LogConfig(colors="off"))
    logging.getLogger("mlxcel").warning("hello")
    reset_logging()
    assert "\x1b" not in logs.readouterr().err


def test_config_from_args_and_environment():
    cfg = LogConfig.from_args(SimpleNamespace(), {})
    assert cfg == LogConfig(disable=False, file=None, colors="auto", prefix=True, timestamps=True, verbosity=3)
    env = {
        "LLAMA_ARG_LOG_FILE": "/tmp/e.log",
        "LLAMA_ARG_LOG_COLORS": "enabled",
        "LLAMA_ARG_LOG_PREFIX": "0",
        "LLAMA_ARG_LOG_TIMESTAMPS": "off",
        "LLAMA_ARG_LOG_VERBOSITY": "2",
    }
    assert LogConfig.from_args(SimpleNamespace(), env) == LogConfig(
        file="/tmp/e.log", colors="on", prefix=False, timestamps=False, verbosity=2
    )
    args = SimpleNamespace(
        log_disable=True,
        log_file="/tmp/a.log",
        log_colors="off",
        log_prefix=True,
        log_timestamps=True,
        verbose=True,
        verbosity=1,
    )
    assert LogConfig.from_args(args, env) == LogConfig(
        disable=True, file="/tmp/a.log", colors="off", prefix=True, timestamps=True, verbosity=VERBOSITY_INFINITE
    )
    with pytest.raises(LogConfigError) as exc:
        LogConfig.from_args(SimpleNamespace(), {"LLAMA_ARG_LOG_PREFIX": "yes"})
    # b10621: error while handling environment variable "LLAMA_ARG_LOG_PREFIX": invalid boolean value
    assert str(exc.value) == 'error while handling environment variable "LLAMA_ARG_LOG_PREFIX": invalid boolean value'


# --- --log-file: refusals and modes --------------------------------------------------------------------------


def _refusal(path) -> str:
    with pytest.raises(LogFileError) as exc:
        open_log_file(str(path))
    msg = str(exc.value)
    assert msg.startswith(f"--log-file '{path}'")
    return msg


def test_log_file_refuses_symlinks(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    link = tmp_path / "server.log"
    link.symlink_to(victim)
    assert "symbolic link" in _refusal(link)
    dangling = tmp_path / "dangling.log"
    dangling.symlink_to(tmp_path / "not-yet")
    assert "symbolic link" in _refusal(dangling)
    assert not (tmp_path / "not-yet").exists()
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_log_file_refuses_a_symlink_planted_after_the_check(tmp_path, monkeypatch):
    # O_NOFOLLOW, not the islink check, is what holds: bypass the check and the open still refuses
    victim = tmp_path / "victim"
    victim.write_text("")
    link = tmp_path / "server.log"
    link.symlink_to(victim)
    monkeypatch.setattr(os.path, "islink", lambda p: False)
    assert "symbolic link" in _refusal(link)
    assert victim.read_text() == ""


def test_log_file_refuses_directories_and_missing_parents(tmp_path):
    assert "is a directory" in _refusal(tmp_path)
    missing = tmp_path / "no-such-dir" / "server.log"
    assert f"parent directory '{tmp_path / 'no-such-dir'}' does not exist" in _refusal(missing)
    (tmp_path / "plain").write_text("")
    assert "is not a directory" in _refusal(tmp_path / "plain" / "server.log")
    with pytest.raises(LogFileError):
        open_log_file("")


def test_log_file_refuses_a_fifo_without_reader(tmp_path):
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    assert "FIFO" in _refusal(fifo)


_UNWRITABLE = textwrap.dedent("""
    import os, sys
    from server.logs import LogFileError, open_log_file  # imported first: nobody may not read the venv
    if os.geteuid() == 0:
        os.setgid(65534)
        os.setuid(65534)
    for path in sys.argv[1:]:
        try:
            open_log_file(path)
        except LogFileError as exc:
            print(exc)
        else:
            print("OPENED", path)
""")


def test_log_file_refuses_unwritable_paths(tmp_path):
    if IS_ROOT:  # nobody must be able to reach the directory: pytest's own tmp root is 0700
        import tempfile

        tmp_path = Path(tempfile.mkdtemp(prefix="mlxcel-logs-"))
    ro_dir = tmp_path / "ro"
    ro_dir.mkdir()
    ro_file = tmp_path / "ro.log"
    ro_file.write_text("")
    ro_file.chmod(0o444)
    if IS_ROOT:  # root writes anywhere: run the open as nobody, for whom these are unwritable
        tmp_path.chmod(0o755)
        ro_dir.chmod(0o755)
    else:
        ro_dir.chmod(0o555)
    try:
        out = subprocess.run(
            [sys.executable, "-c", _UNWRITABLE, str(ro_dir / "server.log"), str(ro_file)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        ro_dir.chmod(0o755)
        if IS_ROOT:
            shutil.rmtree(tmp_path)
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stderr
    assert lines == [
        f"--log-file '{ro_dir / 'server.log'}': cannot be opened for appending: Permission denied",
        f"--log-file '{ro_file}': cannot be opened for appending: Permission denied",
    ]
    assert not (ro_dir / "server.log").exists()
    if IS_ROOT:  # a parent nobody may traverse is reported as such, not as missing
        hidden = tmp_path.parent / (tmp_path.name + "-hidden")
        (hidden / "sub").mkdir(parents=True)
        hidden.chmod(0o700)
        try:
            out = subprocess.run(
                [sys.executable, "-c", _UNWRITABLE, str(hidden / "sub" / "server.log")],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            shutil.rmtree(hidden)
        assert out.stdout.strip() == (
            f"--log-file '{hidden / 'sub' / 'server.log'}': the parent directory "
            f"'{hidden / 'sub'}' cannot be reached: Permission denied"
        )


def test_log_file_created_0600_whatever_the_umask(tmp_path, monkeypatch):
    # created 0600 by the open itself, not loosened by the umask and fixed afterwards
    monkeypatch.setattr(os, "fchmod", lambda fd, mode: pytest.fail("a new file needed tightening"))
    path = tmp_path / "server.log"
    old = os.umask(0)
    try:
        fh = open_log_file(str(path))
    finally:
        os.umask(old)
    fh.write("x\n")
    fh.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "x\n"


def test_existing_log_file_tightened_to_0600_and_appended(tmp_path):
    path = tmp_path / "server.log"
    path.write_text("earlier run\n")
    path.chmod(0o644)
    fh = open_log_file(str(path))
    fh.write("this run\n")
    fh.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == "earlier run\nthis run\n"


def test_configure_logging_refuses_before_installing_anything(logs, tmp_path):
    before = list(logging.getLogger().handlers)
    stderr = sys.stderr
    with pytest.raises(LogFileError):
        configure_logging(LogConfig(file=str(tmp_path)))
    assert logging.getLogger().handlers == before and sys.stderr is stderr


# --- redaction -----------------------------------------------------------------------------------------------


class _Sink:
    def __init__(self):
        self.parts: list[str] = []

    def write(self, s):
        self.parts.append(s)

    def flush(self):
        pass

    @property
    def text(self):
        return "".join(self.parts)


def test_redacting_stream_reassembles_a_secret_split_across_writes():
    sink = _Sink()
    stream = RedactingStream(sink, Redactor(["s3cr3t-KEY"]))
    stream.write("key is s3c")
    stream.flush()  # releases what cannot be the start of the secret, holds "s3c"
    assert sink.text == "key is "
    stream.write("r3t-KE")
    stream.flush()
    stream.write("Y and more\nnext s3cr3t")
    stream.flush()
    stream.write("-KEY\n")
    assert sink.text == f"key is {REDACTED} and more\nnext {REDACTED}\n"
    stream.write("tail s3")
    stream.drain()
    assert sink.text.endswith("tail s3")


def test_redactor_catches_escaped_spellings_and_ignores_empty():
    secret = 'k"e\\y/+ é'
    red = Redactor([secret, "", None])
    for spelling in (secret, json.dumps(secret)[1:-1], repr(secret)[1:-1]):
        assert red.redact(f"<{spelling}>") == f"<{REDACTED}>"
    from urllib.parse import quote

    assert red.redact(quote(secret, safe="")) == REDACTED
    assert not Redactor(["", None])


def test_collect_secrets_from_every_source(tmp_path):
    key_file = tmp_path / "keys"
    key_file.write_text("# comment\nfile-key-1\n\nfile-key-2\r\n")
    env_file = tmp_path / "env-keys"
    env_file.write_text("env-file-key\n")
    args = SimpleNamespace(api_key=['cli-a,"cli,b"', "cli-c"], api_key_file=str(key_file), hf_token="hft")
    env = {
        "LLAMA_API_KEY": "llama-env",
        "MLXCEL_API_KEY": "mlxcel-env",
        "HF_TOKEN": "hf-env",
        "LLAMA_ARG_API_KEY_FILE": str(env_file),
    }
    found = collect_secrets(args, env)
    for s in (
        "cli-a",
        "cli,b",
        "cli-c",
        "file-key-1",
        "file-key-2\r",
        "llama-env",
        "mlxcel-env",
        "hf-env",
        "env-file-key",
        "hft",
    ):
        assert s in found, s
    assert "# comment" not in found and "" not in found
    assert collect_secrets(SimpleNamespace(api_key_file=str(tmp_path / "missing")), {}) == []


_CANARY_SCRIPT = textwrap.dedent("""
    import json, logging, os, socket, sys, threading, time, warnings
    from types import SimpleNamespace
    cfg = json.loads(sys.argv[1])
    C = cfg["canaries"]
    from server.logs import LogConfig, collect_secrets, configure_logging, uvicorn_log_settings
    args = SimpleNamespace(api_key=[C["cli"] + "," + C["cli2"]], api_key_file=cfg["key_file"],
                           hf_token=C["hf_cli"], log_file=cfg["log_file"], verbose=True, log_colors="off")
    secrets = collect_secrets(args) if cfg["redact"] else []
    configure_logging(LogConfig.from_args(args), secrets)
    every = " ".join(C.values())
    mine = logging.getLogger("mlxcel")
    mine.info("CONTROL-info %s", every)
    logging.getLogger("mlxcel.engine").warning("CONTROL-engine " + every)
    logging.getLogger("mlxcel.api").debug("CONTROL-debug %r", list(C.values()))
    logging.getLogger("mlxcel.api").info("CONTROL-json %s", json.dumps({"keys": list(C.values())}))
    logging.getLogger("uvicorn.error").error("CONTROL-uvicorn-error %s", every)
    logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "GET",
                                             "/CONTROL-access?key=" + C["env_llama"], "1.1", 200)
    logging.getLogger("httpx").warning("CONTROL-dependency %s", every)
    try:
        raise ValueError("CONTROL-exception " + every)
    except ValueError:
        mine.exception("CONTROL-traceback")
    warnings.warn("CONTROL-warning " + every)
    sys.stderr.write("CONTROL-split " + C["cli"][:5])
    sys.stderr.write(C["cli"][5:] + "\\n")
    print("CONTROL-print", every, file=sys.stderr)

    # a real uvicorn server: its access log and its exception log
    import httpx, uvicorn

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        if scope["path"].startswith("/boom"):
            raise RuntimeError("CONTROL-asgi " + every)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, **uvicorn_log_settings()))
    t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    while not server.started:
        time.sleep(0.01)
    httpx.get(f"http://127.0.0.1:{port}/CONTROL-uvicorn-access?k={C['env_mlxcel']}")
    httpx.get(f"http://127.0.0.1:{port}/boom/{C['hf_env']}")
    server.should_exit = True
    t.join(10)

    def thread_fails():
        raise RuntimeError("CONTROL-thread " + every)
    th = threading.Thread(target=thread_fails)
    th.start()
    th.join()
    raise SystemExit("CONTROL-exit " + every)
""")


@pytest.mark.parametrize("redact", [True, False], ids=["redacted", "control-without-secrets"])
def test_log_canaries_never_reach_any_sink(tmp_path, redact):
    """A unique canary per secret source, written through every logger and every path to stderr (mlxcel's,
    uvicorn's error and access loggers from a real server, a dependency, tracebacks, warnings, raw writes
    split mid-secret, a thread's uncaught exception, the exit message). With redaction none may show on stderr,
    stdout or the log file; the control run without registered secrets proves every path reaches the sinks."""
    tag = uuid.uuid4().hex[:12]
    canaries = {
        src: f"canary-{src}-{tag}"
        for src in ("cli", "cli2", "key_file", "env_llama", "env_mlxcel", "hf_cli", "hf_env", "env_key_file")
    }
    key_file = tmp_path / "keys"
    key_file.write_text(f"# keys\n{canaries['key_file']}\n")
    env_key_file = tmp_path / "env-keys"
    env_key_file.write_text(f"{canaries['env_key_file']}\n")
    log_file = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "LLAMA_ARG_LOG_VERBOSITY")}
    env.update(
        LLAMA_API_KEY=canaries["env_llama"],
        MLXCEL_API_KEY=canaries["env_mlxcel"],
        HF_TOKEN=canaries["hf_env"],
        LLAMA_ARG_API_KEY_FILE=str(env_key_file),
        PYTHONWARNINGS="always",
    )
    cfg = {"canaries": canaries, "key_file": str(key_file), "log_file": str(log_file), "redact": redact}
    out = subprocess.run(
        [sys.executable, "-c", _CANARY_SCRIPT, json.dumps(cfg)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    file_text = log_file.read_text()
    sinks = {"stderr": out.stderr, "stdout": out.stdout, "file": file_text}
    assert out.returncode == 1, out.stderr
    controls = (
        "CONTROL-info",
        "CONTROL-engine",
        "CONTROL-debug",
        "CONTROL-json",
        "CONTROL-uvicorn-error",
        "CONTROL-access",
        "CONTROL-dependency",
        "CONTROL-exception",
        "CONTROL-traceback",
        "CONTROL-warning",
        "CONTROL-uvicorn-access",
        "CONTROL-asgi",
    )
    for c in controls:  # every path really reached both sinks
        assert c in out.stderr, c
        assert c in file_text, c
    for c in ("CONTROL-split", "CONTROL-print", "CONTROL-thread", "CONTROL-exit"):  # stderr-only paths
        assert c in out.stderr, c
    for name, text in sinks.items():
        for src, canary in canaries.items():
            if redact:
                assert canary not in text, f"{src} canary reached {name}"
                assert canary[: len(canary) - 2] not in text, f"part of the {src} canary reached {name}"
            elif name != "stdout":
                assert canary in text, f"{src} canary missing from {name} without redaction"
    if redact:
        assert REDACTED in out.stderr and REDACTED in file_text
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600


# --- --cache-list, --version, --completion-bash --------------------------------------------------------------


def test_cache_list_format_and_entries(tmp_path):
    root = tmp_path / "models"
    (root / "smollm2-135m-instruct-q4_1").mkdir(parents=True)
    (root / "smollm2-135m-instruct-q4_1" / "config.json").write_text("{}")
    (root / "smollm2-135m-instruct-q4_1.lock").write_text("")
    (root / "smollm2-135m-instruct-f32.tmp-abc").mkdir()
    (root / "smollm2-135m-instruct-f32.tmp-abc" / "config.json").write_text("{}")
    (root / "half-done").mkdir()
    (root / "other").mkdir()
    (root / "other" / "model.safetensors").write_bytes(b"")
    models = cached_models(root)
    assert models == [str(root / "other"), "smollm2-135m-instruct-q4_1"]
    # b10621: printf("number of models in cache: %zu\n"), then printf("%4zu. %s\n") per model
    assert cache_list_text(models) == (
        f"number of models in cache: 2\n   1. {root / 'other'}\n   2. smollm2-135m-instruct-q4_1\n"
    )
    assert cache_list_text([]) == "number of models in cache: 0\n"  # the reference's output with no cache
    assert cached_models(tmp_path / "nowhere") == []


def test_version_text_shape():
    # b10621's llama_print_build_info, as the reference prints it:
    #   version: 0.3.0-dev (build 0, commit unknown)
    #   built with GNU 12.2.0 for Linux x86_64
    import platform
    import re

    text = version_text()
    lines = text.split("\n")
    assert len(lines) == 3 and lines[2] == ""
    assert re.fullmatch(r"version: \S+ \(build 10621, commit (unknown|[0-9a-f]{4,40})\)", lines[0]), lines[0]
    assert re.fullmatch(rf"built with \S+ \S+( and mlx \S+)? for {platform.system()} {platform.machine()}", lines[1]), (
        lines[1]
    )


SURFACE = {
    "binary": "mlxcel-server",
    "options": [
        {"spellings": ["-h", "--help"], "hidden": False},
        {"spellings": ["-m", "--model"], "hidden": False},
        {"spellings": ["-cb", "--cont-batching", "-nocb", "--no-cont-batching"], "hidden": False},
        {"spellings": ["--no-warmup"], "hidden": False},
        {"spellings": ["--log-file"], "hidden": False},
        {"spellings": ["--grammar-file"], "hidden": False},
        {"spellings": ["-ngl", "--n-gpu-layers"], "hidden": True},
        {"spellings": ["--dump-flag-surface"], "hidden": False},
    ],
}


def test_completion_spellings_visible_positive_only():
    assert completion_spellings(SURFACE) == [
        "-h",
        "--help",
        "-m",
        "--model",
        "-cb",
        "--cont-batching",
        "--no-warmup",
        "--log-file",
        "--grammar-file",
    ]
    with pytest.raises(ValueError):
        completion_spellings([{"spellings": ["--x;rm -rf /"]}])
    with pytest.raises(ValueError):
        completion_bash(SURFACE, "bad;name")


def _complete(script: str, words: list[str], func: str) -> list[str]:
    bash = shutil.which("bash")
    import shlex

    # the last word is the one being completed
    driver = (
        f"{script}\nCOMP_WORDS=({' '.join(map(shlex.quote, words))}); COMP_CWORD={len(words) - 1}; {func}; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    out = subprocess.run([bash, "-c", driver], capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.split()


def test_completion_script_passes_bash_n_and_completes(tmp_path):
    bash = shutil.which("bash")
    require(bash is not None, "needs bash")
    for prog, func, command in (
        ("mlxcel-server", "_mlxcel_server_completions", "mlxcel-server"),
        ("mlxcel serve", "_mlxcel_completions", "mlxcel"),
    ):
        script = completion_bash(SURFACE, prog)
        path = tmp_path / f"{command}.bash"
        path.write_text(script)
        subprocess.run([bash, "-n", str(path)], check=True, timeout=30)
        assert script.rstrip().endswith(f"complete -F {func} {command}")
        assert "--n-gpu-layers" not in script and "--dump-flag-surface" not in script
        assert "--no-cont-batching" not in script
        assert "--log-file)" in script.replace("|", ")\n")  # the path-valued options complete files
    script = completion_bash(SURFACE, "mlxcel-server")
    assert _complete(script, ["mlxcel-server", "--mo"], "_mlxcel_server_completions") == ["--model"]
    assert "smollm2-135m-instruct-q4_1" in _complete(
        script, ["mlxcel-server", "-m", "smollm2-135m-instruct-q"], "_mlxcel_server_completions"
    )
    script = completion_bash(SURFACE, "mlxcel serve")
    assert _complete(script, ["mlxcel", ""], "_mlxcel_completions") == ["serve", "convert"]
    assert _complete(script, ["mlxcel", "serve", "--grammar-f"], "_mlxcel_completions") == ["--grammar-file"]


def test_completion_script_from_the_live_parser_passes_bash_n(tmp_path):
    from server.cli.args import build_parser

    require(shutil.which("bash") is not None, "needs bash")

    parser = build_parser("mlxcel-server")
    script = completion_bash(parser, "mlxcel-server")
    path = tmp_path / "live.bash"
    path.write_text(script)
    subprocess.run([shutil.which("bash"), "-n", str(path)], check=True, timeout=30)
    assert " --model " in script and "--dump-flag-surface" not in script
