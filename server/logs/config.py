"""The logging options as plain data, resolved with b10621's vocabularies and precedence.

common/arg.cpp and common/log.{h,cpp} are the ground truth: the verbosity scale (0 output, 1 error, 2 warning,
3 info, 4 trace, 5 debug; default 3; ``-v`` is INT_MAX), the colors vocabulary (is_truthy / is_falsey /
is_autoy, case-sensitive), parse_bool_value for the prefix/timestamps pair, std::stoi for the verbosity
variable, and common_init's defaults (prefix and timestamps on).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .. import textparse
from ..textparse import AUTOY, FALSEY, TRUTHY, parse_csv_row

VERBOSITY_DEFAULT = 3  # LOG_DEFAULT_LLAMA
VERBOSITY_INFINITE = 2**31 - 1  # -v sets INT_MAX
LOG_LEVEL_OUTPUT, LOG_LEVEL_ERROR, LOG_LEVEL_WARN, LOG_LEVEL_INFO, LOG_LEVEL_TRACE, LOG_LEVEL_DEBUG = range(6)

# b10621's LOG_TRC: between info and debug, printed with the I tag. mlxcel code logs at it via log.log(TRACE, ...)
TRACE = 15
logging.addLevelName(TRACE, "TRACE")

OWN_LOGGER = "mlxcel"  # mlxcel's own loggers: "mlxcel" and "mlxcel.*"

ENV_LOG_FILE = "LLAMA_ARG_LOG_FILE"
ENV_LOG_COLORS = "LLAMA_ARG_LOG_COLORS"
ENV_LOG_PREFIX = "LLAMA_ARG_LOG_PREFIX"
ENV_LOG_TIMESTAMPS = "LLAMA_ARG_LOG_TIMESTAMPS"
ENV_LOG_VERBOSITY = "LLAMA_ARG_LOG_VERBOSITY"


class LogConfigError(ValueError):
    """A logging option whose value b10621 refuses too; the message is b10621's sentence."""


def parse_log_colors(value: str) -> str:
    """--log-colors / LLAMA_ARG_LOG_COLORS: 'on', 'off' or 'auto', with b10621's case-sensitive spellings."""
    if value in TRUTHY:
        return "on"
    if value in FALSEY:
        return "off"
    if value in AUTOY:
        return "auto"
    raise LogConfigError(f"error: unknown value for --log-colors: '{value}'")


def parse_bool_value(value: str) -> bool:
    """common/arg.cpp's parse_bool_value, used for a bool pair's environment variable."""
    try:
        return textparse.parse_bool_value(value)
    except ValueError as exc:
        raise LogConfigError(str(exc)) from None


def stoi(value: str) -> int:
    """std::stoi: optional leading whitespace and sign, then digits; trailing text ignored; int32 range."""
    try:
        return textparse.stoi(value)
    except ValueError as exc:
        raise LogConfigError(str(exc)) from None


def _env_error(var: str, exc: Exception) -> LogConfigError:
    return LogConfigError(f'error while handling environment variable "{var}": {exc}')


def resolve_verbosity(
    verbose: bool = False, verbosity: int | None = None, environ: Mapping[str, str] | None = None
) -> int:
    """The verbosity threshold. Highest first: -v/--verbose (INT_MAX), then -lv/--verbosity N, then
    LLAMA_ARG_LOG_VERBOSITY (std::stoi), then 3. b10621 applies -v and -lv in command-line order; without an
    order the more verbose request wins, as the spec decides."""
    if verbose:
        return VERBOSITY_INFINITE
    if verbosity is not None:
        return int(verbosity)
    environ = os.environ if environ is None else environ
    raw = environ.get(ENV_LOG_VERBOSITY)
    if raw is not None:
        try:
            return stoi(raw)
        except LogConfigError as exc:
            raise _env_error(ENV_LOG_VERBOSITY, exc) from None
    return VERBOSITY_DEFAULT


def record_verbosity(name: str, levelno: int) -> int:
    """Where a Python log record sits on b10621's scale.

    mlxcel's own loggers map as LOG_ERR/LOG_WRN/LOG_INF/LOG_TRC/LOG_DBG do. Every other logger (uvicorn,
    its access log, libraries) is treated as common_log_default_callback treats ggml and libllama: its info
    is trace (4), so the default threshold shows only mlxcel's info and everyone's warnings and errors.
    """
    own = name == OWN_LOGGER or name.startswith(OWN_LOGGER + ".")
    if levelno >= logging.ERROR:
        return LOG_LEVEL_ERROR
    if levelno >= logging.WARNING:
        return LOG_LEVEL_WARN
    if levelno >= logging.INFO:
        return LOG_LEVEL_INFO if own else LOG_LEVEL_TRACE
    if levelno >= TRACE:
        return LOG_LEVEL_TRACE
    return LOG_LEVEL_DEBUG


_SILENT = logging.CRITICAL + 10  # above every level: threshold 0 drops errors too, as b10621's does


def python_level(verbosity: int, own: bool) -> int:
    """The Python logging level a logger needs so that every record passing the threshold is created.

    own (the "mlxcel" tree): 0 -> nothing, 1 -> ERROR, 2 -> WARNING, 3 -> INFO, 4 -> TRACE (15),
    5 and above -> every level (1), so -v and -lv 5 are the same filter for mlxcel.
    others (root, uvicorn): 0 -> nothing, 1 -> ERROR, 2 and 3 -> WARNING, 4 -> TRACE (their INFO is trace),
    5 and above -> DEBUG;
    the top tier does not open libraries' sub-DEBUG levels (uvicorn's TRACE 5, asyncio internals).
    """
    if verbosity <= LOG_LEVEL_OUTPUT:
        return _SILENT
    if verbosity == LOG_LEVEL_ERROR:
        return logging.ERROR
    if verbosity == LOG_LEVEL_WARN:
        return logging.WARNING
    if verbosity == LOG_LEVEL_INFO:
        return logging.INFO if own else logging.WARNING
    if verbosity == LOG_LEVEL_TRACE:
        return TRACE
    return 1 if own else logging.DEBUG


@dataclass(frozen=True)
class LogConfig:
    """Where and how the server logs. Plain data: the CLI fills it from its parsed arguments."""

    disable: bool = False  # --log-disable: no sink at all (common_log_pause)
    file: str | None = None  # --log-file / LLAMA_ARG_LOG_FILE
    colors: str = "auto"  # --log-colors / LLAMA_ARG_LOG_COLORS, normalized to on | off | auto
    prefix: bool = True  # --log-prefix / --no-log-prefix / LLAMA_ARG_LOG_PREFIX (common_init: on)
    timestamps: bool = True  # --log-timestamps / --no-log-timestamps / LLAMA_ARG_LOG_TIMESTAMPS (on)
    verbosity: int = VERBOSITY_DEFAULT  # resolved threshold, VERBOSITY_INFINITE for -v

    def __post_init__(self) -> None:
        if self.colors not in ("on", "off", "auto"):
            object.__setattr__(self, "colors", parse_log_colors(self.colors))

    @classmethod
    def from_args(cls, args, environ: Mapping[str, str] | None = None) -> LogConfig:
        """From the CLI's namespace (log_disable, log_file, log_colors, log_prefix, log_timestamps, verbose,
        verbosity). An attribute that is absent or None falls back to its LLAMA_ARG_* variable, read with
        b10621's rules, then to b10621's default; a value on the namespace always beats the environment."""
        environ = os.environ if environ is None else environ

        def given(name: str):
            return getattr(args, name, None)

        def env_bool(var: str, default: bool) -> bool:
            raw = environ.get(var)
            if raw is None:
                return default
            try:
                return parse_bool_value(raw)
            except LogConfigError as exc:
                raise _env_error(var, exc) from None

        log_file = given("log_file")
        if log_file is None:
            log_file = environ.get(ENV_LOG_FILE)
        colors = given("log_colors")
        if colors is None and environ.get(ENV_LOG_COLORS) is not None:
            try:
                colors = parse_log_colors(environ[ENV_LOG_COLORS])
            except LogConfigError as exc:
                raise _env_error(ENV_LOG_COLORS, exc) from None
        prefix = given("log_prefix")
        timestamps = given("log_timestamps")
        return cls(
            disable=bool(given("log_disable")),
            file=log_file or None,
            colors=parse_log_colors(colors) if isinstance(colors, str) else "auto",
            prefix=env_bool(ENV_LOG_PREFIX, True) if prefix is None else bool(prefix),
            timestamps=env_bool(ENV_LOG_TIMESTAMPS, True) if timestamps is None else bool(timestamps),
            verbosity=resolve_verbosity(bool(given("verbose")), given("verbosity"), environ),
        )


# --- the secrets every sink must never show ---------------------------------------------------------------

SECRET_ENV = ("LLAMA_API_KEY", "MLXCEL_API_KEY", "HF_TOKEN", "LLAMA_ARG_HF_TOKEN")
SECRET_FILE_ENV = ("LLAMA_ARG_API_KEY_FILE",)
SECRET_ATTRS = ("api_key", "hf_token", "ssl_key_password", "ssl_key_passphrase")
SECRET_FILE_ATTRS = ("api_key_file",)


def _values(raw) -> list[str]:
    if raw is None or raw is False:
        return []
    if isinstance(raw, (list, tuple, set, frozenset)):
        return [v for item in raw for v in _values(item)]
    return [str(raw)]


def _key_file_lines(path: str) -> list[str]:
    """The keys an --api-key-file holds (one a line, '#' comments), read as b10621 reads them. An
    unreadable file is left to the authentication check, which refuses to start."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
            return [line.rstrip("\n") for line in fh if line.rstrip("\n") and not line.startswith("#")]
    except OSError:
        return []


def collect_secrets(args=None, environ: Mapping[str, str] | None = None, extra: Iterable[str] = ()) -> list[str]:
    """Every configured secret: --api-key (each comma-separated key and the whole value), --api-key-file's
    keys, LLAMA_API_KEY, MLXCEL_API_KEY, LLAMA_ARG_API_KEY_FILE's keys, --hf-token, HF_TOKEN, any SSL key
    passphrase attribute, and `extra`. Register them before the first log line is written."""
    environ = os.environ if environ is None else environ
    raw: list[str] = []
    for attr in SECRET_ATTRS:
        raw += _values(getattr(args, attr, None))
    raw += [environ[v] for v in SECRET_ENV if environ.get(v)]
    files = [p for attr in SECRET_FILE_ATTRS for p in _values(getattr(args, attr, None))]
    files += [environ[v] for v in SECRET_FILE_ENV if environ.get(v)]
    for path in files:
        raw += _key_file_lines(path)
    raw += [s for s in extra if s]
    found: list[str] = []
    for value in raw:
        for candidate in (value, *parse_csv_row(value)):
            if candidate and candidate not in found:
                found.append(candidate)
    return found
