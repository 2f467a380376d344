"""The log sinks: standard error and --log-file, both formatted as b10621's common_log prints a line and both
behind the redacting stream.

Line format (common/log.cpp, common_log_entry::print), recorded from the reference binary:
    0.00.007.643 I srv  load_model: ...            prefix and timestamps (the defaults)
    I srv  load_model: ...                         --no-log-timestamps
    srv  load_model: ...                           --no-log-prefix
The timestamp is minutes.seconds.milliseconds.microseconds since the logger started. W, E and D lines get
their color and the closing reset after the message's newline, exactly as b10621 writes them.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from .config import OWN_LOGGER, TRACE, LogConfig, python_level, record_verbosity
from .redact import RedactingStream, Redactor

T_START = time.time()  # common_log's t_start: when the logger came up (this module's import)

COL_DEFAULT = "\033[0m"
COL_RED = "\033[31m"
COL_GREEN = "\033[32m"
COL_YELLOW = "\033[33m"
COL_BLUE = "\033[34m"
COL_MAGENTA = "\033[35m"

# dependencies whose loggers must reach our sinks and nothing else
_DEPENDENCY_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


class LogFileError(ValueError):
    """--log-file names a destination mlxcel refuses to write to; the message names the option and path."""


def open_log_file(path: str) -> TextIO:  # noqa: C901
    """Open --log-file for appending, created 0600 and tightened to 0600, never through a symbolic link.

    Refused, each with its own sentence: a symbolic link (O_NOFOLLOW), a directory, a missing parent
    directory, anything that cannot be opened for writing, and a file whose mode cannot be tightened.
    """
    shown = f"--log-file '{path}'"
    if not path:
        raise LogFileError("--log-file: the path is empty; name the file to log to")
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.islink(path):
        raise LogFileError(
            f"{shown}: is a symbolic link; refusing to follow it, since a link planted at a log "
            f"path redirects the server log into another file. Name the real file instead"
        )
    try:
        parent_is_dir = stat.S_ISDIR(os.stat(parent).st_mode)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise LogFileError(f"{shown}: the parent directory '{parent}' cannot be reached: {exc.strerror}") from None
        parent_is_dir = False
    if not parent_is_dir:
        what = "does not exist" if not os.path.lexists(parent) else "is not a directory"
        raise LogFileError(f"{shown}: the parent directory '{parent}' {what}; create it first or log elsewhere")
    if os.path.isdir(path):
        raise LogFileError(f"{shown}: is a directory; name a file inside it instead")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EMLINK and os.path.islink(path)):
            raise LogFileError(
                f"{shown}: is a symbolic link; refusing to follow it, since a link planted at a "
                f"log path redirects the server log into another file. Name the real file "
                f"instead"
            ) from None
        if exc.errno == errno.EISDIR:
            raise LogFileError(f"{shown}: is a directory; name a file inside it instead") from None
        if exc.errno == errno.ENXIO:
            raise LogFileError(f"{shown}: is a FIFO with no reader; start the reader first or log to a file") from None
        raise LogFileError(f"{shown}: cannot be opened for appending: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise LogFileError(f"{shown}: is a directory; name a file inside it instead")
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) != 0o600:
            try:
                os.fchmod(fd, 0o600)
            except OSError as exc:
                raise LogFileError(
                    f"{shown}: exists with mode {stat.S_IMODE(st.st_mode):04o} and cannot be "
                    f"restricted to 0600 ({exc.strerror}); the log would stay readable by "
                    f"others. Fix its owner or log elsewhere"
                ) from None
        os.set_blocking(fd, True)
        return os.fdopen(fd, "a", buffering=1, encoding="utf-8", errors="backslashreplace")
    except BaseException:
        os.close(fd)
        raise


def tty_can_use_colors(environ=None) -> bool:
    """common.cpp's tty_can_use_colors: NO_COLOR unset or empty, TERM not dumb, stdout or stderr a tty."""
    environ = os.environ if environ is None else environ
    if environ.get("NO_COLOR"):
        return False
    if environ.get("TERM") == "dumb":
        return False
    for stream in (sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None and os.isatty(stream.fileno()):
                return True
        except (AttributeError, ValueError, OSError):
            pass
    return False


def format_timestamp(us: int) -> str:
    """b10621's "%d.%02d.%03d.%03d": minutes, seconds, milliseconds, microseconds."""
    return f"{us // 1000000 // 60}.{us // 1000000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"


class B10621Formatter(logging.Formatter):
    """One record as common_log_entry::print writes it: [timestamp ][level tag ]message."""

    def __init__(
        self, prefix: bool = True, timestamps: bool = True, colors: bool = False, t_start: float | None = None
    ):
        super().__init__()
        self.prefix, self.timestamps, self.colors = prefix, timestamps, colors
        self.t_start = T_START if t_start is None else t_start

    def _col(self, code: str) -> str:
        return code if self.colors else ""

    def body(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.name != OWN_LOGGER:
            name = record.name[len(OWN_LOGGER) + 1 :] if record.name.startswith(OWN_LOGGER + ".") else record.name
            message = f"{name}: {message}"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            message = message.rstrip("\n") + "\n" + record.exc_text
        if record.stack_info:
            message = message.rstrip("\n") + "\n" + self.formatStack(record.stack_info)
        return message if message.endswith("\n") else message + "\n"

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelno
        tag, color = (
            ("E ", COL_RED)
            if level >= logging.ERROR
            else ("W ", COL_MAGENTA)
            if level >= logging.WARNING
            else ("I ", COL_GREEN)
            if level >= TRACE
            else ("D ", COL_YELLOW)
        )
        head = ""
        if self.prefix:
            us = max(0, round((record.created - self.t_start) * 1e6))
            if self.timestamps and us:
                head += f"{self._col(COL_BLUE)}{format_timestamp(us)}{self._col(COL_DEFAULT)} "
            # I resets right after its tag; W, E and D keep their color through the message
            head += self._col(color) + tag + (self._col(COL_DEFAULT) if tag == "I " else "")
        tail = self._col(COL_DEFAULT) if tag != "I " else ""
        return head + self.body(record) + tail


class _ThresholdFilter(logging.Filter):
    def __init__(self, verbosity: int):
        super().__init__()
        self.verbosity = verbosity

    def filter(self, record: logging.LogRecord) -> bool:
        return record_verbosity(record.name, record.levelno) <= self.verbosity


class SinkHandler(logging.Handler):
    """Writes each formatted record to a redacting stream in one write, then flushes it."""

    def __init__(self, stream: RedactingStream, formatter: B10621Formatter, verbosity: int):
        super().__init__(logging.NOTSET)
        self.stream = stream
        self.setFormatter(formatter)
        self.addFilter(_ThresholdFilter(verbosity))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            self.stream.write(text)
            self.stream.flush()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)


@dataclass
class LogSetup:
    """What configure_logging installed, so that reset_logging can take it down again."""

    config: LogConfig
    redactor: Redactor
    handlers: list[logging.Handler] = field(default_factory=list)
    file: TextIO | None = None
    stderr: RedactingStream | None = None
    previous_stderr: TextIO | None = None
    previous_levels: dict[str, tuple[int, bool, list]] = field(default_factory=dict)


_current: LogSetup | None = None


def configure_logging(config: LogConfig, secrets=(), *, wrap_stderr: bool = True) -> LogSetup:
    """Install mlxcel's logging for the whole process. Call it once at startup, before the model reference is
    resolved: it opens --log-file (raising LogFileError with the refusal's sentence) and from then on every
    line on every sink passes the redaction of `secrets`.

    --log-disable installs no sink at all (a NullHandler keeps Python's last-resort handler quiet). With
    `wrap_stderr`, sys.stderr itself is replaced by the redacting stream, so tracebacks, warnings and prints
    that bypass logging are redacted too.
    """
    global _current
    reset_logging()
    redactor = Redactor(secrets)
    setup = LogSetup(config=config, redactor=redactor)
    log_file = None if config.disable or not config.file else open_log_file(config.file)
    setup.file = log_file

    if wrap_stderr:
        setup.previous_stderr = sys.stderr
        setup.stderr = RedactingStream(sys.stderr, redactor)
        sys.stderr = setup.stderr
    err_stream = setup.stderr or RedactingStream(sys.stderr, redactor)

    root = logging.getLogger()
    own = logging.getLogger(OWN_LOGGER)
    for name in ("", OWN_LOGGER, *_DEPENDENCY_LOGGERS):
        lg = logging.getLogger(name)
        setup.previous_levels[name] = (lg.level, lg.propagate, list(lg.handlers))
    for h in list(root.handlers):  # basicConfig's, or an earlier configuration's
        if type(h) in (logging.StreamHandler, logging.FileHandler, SinkHandler, logging.NullHandler):
            root.removeHandler(h)
    for name in (OWN_LOGGER, *_DEPENDENCY_LOGGERS):  # uvicorn's dictConfig handlers, if it ran first
        lg = logging.getLogger(name)
        for h in list(lg.handlers):
            lg.removeHandler(h)
        lg.propagate = True
        lg.setLevel(logging.NOTSET)

    if config.disable:
        setup.handlers.append(logging.NullHandler())
    else:
        use_colors = config.colors == "on" or (config.colors == "auto" and tty_can_use_colors())
        fmt = {"prefix": config.prefix, "timestamps": config.timestamps}
        setup.handlers.append(SinkHandler(err_stream, B10621Formatter(colors=use_colors, **fmt), config.verbosity))
        if log_file is not None:
            # auto colors only a terminal; a file gets escapes only when asked for with 'on' (as b10621 does)
            file_stream = RedactingStream(log_file, redactor, owns_target=True)
            setup.handlers.append(
                SinkHandler(file_stream, B10621Formatter(colors=config.colors == "on", **fmt), config.verbosity)
            )
    for h in setup.handlers:
        root.addHandler(h)
    root.setLevel(python_level(config.verbosity, own=False))
    own.setLevel(python_level(config.verbosity, own=True))
    logging.captureWarnings(True)
    _current = setup
    return setup


def reset_logging() -> None:
    """Undo configure_logging: remove its handlers, close the file, restore sys.stderr and logger levels."""
    global _current
    setup, _current = _current, None
    if setup is None:
        return
    root = logging.getLogger()
    for h in setup.handlers:
        root.removeHandler(h)
        if isinstance(h, SinkHandler) and h.stream is not setup.stderr:
            h.stream.close()
    if setup.stderr is not None:
        try:
            setup.stderr.drain()
        except (ValueError, OSError):
            pass
        if sys.stderr is setup.stderr:
            sys.stderr = setup.previous_stderr
    for name, (level, propagate, handlers) in setup.previous_levels.items():
        lg = logging.getLogger(name)
        lg.setLevel(level)
        lg.propagate = propagate
        for h in handlers:
            if h not in lg.handlers:
                lg.addHandler(h)
    logging.captureWarnings(False)


def current_setup() -> LogSetup | None:
    return _current


def uvicorn_log_settings() -> dict:
    """Keyword arguments for uvicorn.Config that leave logging to configure_logging: uvicorn installs no
    dictConfig and sets no level, and its access log flows into our sinks (at trace, verbosity 4)."""
    return {"log_config": None, "log_level": None, "access_log": True, "use_colors": False}
