"""mlxcel's logging: b10621's log options (common/log.cpp, common/arg.cpp) as plain data, and the sinks they
configure with every configured secret redacted.

Startup order for the CLI (after parsing, before anything resolves or loads a model):
  1. the print-and-exit options --version, --cache-list and --completion-bash (server/cli/introspect.py)
  2. config = LogConfig.from_args(args)            (LogConfigError: print it, exit 1)
  3. secrets = collect_secrets(args)
  4. configure_logging(config, secrets)            (LogFileError: print it, exit 1)
  5. classify options, resolve -m, load; uvicorn.Config(..., **uvicorn_log_settings())
"""

from .config import (
    TRACE,
    VERBOSITY_DEFAULT,
    VERBOSITY_INFINITE,
    LogConfig,
    LogConfigError,
    collect_secrets,
    parse_bool_value,
    parse_log_colors,
    python_level,
    record_verbosity,
    resolve_verbosity,
)
from .redact import REDACTED, RedactingStream, Redactor
from .sink import (
    B10621Formatter,
    LogFileError,
    LogSetup,
    configure_logging,
    current_setup,
    format_timestamp,
    open_log_file,
    reset_logging,
    tty_can_use_colors,
    uvicorn_log_settings,
)

__all__ = [
    "REDACTED",
    "TRACE",
    "VERBOSITY_DEFAULT",
    "VERBOSITY_INFINITE",
    "B10621Formatter",
    "LogConfig",
    "LogConfigError",
    "LogFileError",
    "LogSetup",
    "RedactingStream",
    "Redactor",
    "collect_secrets",
    "configure_logging",
    "current_setup",
    "format_timestamp",
    "open_log_file",
    "parse_bool_value",
    "parse_log_colors",
    "python_level",
    "record_verbosity",
    "reset_logging",
    "resolve_verbosity",
    "tty_can_use_colors",
    "uvicorn_log_settings",
]
