"""A start from a parsed command line, once every option and the HTTP layer's settings were accepted
(server/cli/main.py): the model's state (checkpoint, tokenizer, engine, chat settings, request defaults), its
routes and the HTTP server, or router mode's pool of such models. Importing this module imports mlx: after
blas.activate()."""

from __future__ import annotations

import atexit
import dataclasses
import json
import logging
import math
import os
import re
import sys
import threading
from pathlib import Path

from .. import blas
from ..api.auth import AuthConfig
from ..api.state import AppState, ServerSettings
from ..api.task_params import SAMPLER_CHARS, SAMPLER_NAMES, TaskParams, f32
from ..api.webui_settings import WebUI
from ..backends import BackendRefusal, load_sharded, sharded_fingerprint
from ..backends.distributed import Channel, follow, split_of, split_refusal, world
from ..build import media_marker
from ..chat.autoparser import template_supports_thinking
from ..chat.formats import REASONING_FORMATS
from ..chat.legacy import (
    LEGACY_TEMPLATES,
    default_template_source,
    unsupported_template_message,
    verify_legacy,
)
from ..chat.params import ChatSettings
from ..encoder.startup import EncoderModeError, encoder_config
from ..encoder.worker import EncoderWorker
from ..engine.engine import Engine, EngineConfig
from ..engine.ngram_drafters import (
    CacheParams,
    LookupCacheError,
    MapParams,
    ModParams,
    NgramDrafters,
    load_lookup_cache,
)
from ..engine.slot_files import Identity
from ..engine.speculative import DraftConfig, vocab_mismatch
from ..grammar.json_schema import json_schema_to_grammar
from ..logs import LogConfig, uvicorn_log_settings
from ..models import control_vector, kv_override, tensor_check
from ..models.bert import encoder_ftype
from ..models.facts import head_dim, model_facts
from ..models.kv_numerics import KVNumerics
from ..models.loader import model_ftype, read_config
from ..models.lora import check_scale
from ..models.store import ModelNotFound, resolve_model
from ..models.tokenizer import ModelTokenizer
from ..models.yarn import YarnFlags
from ..router.pool import Loaded
from ..textparse import parse_csv_row, stof, stoi
from ..tools import mcp
from ..tools.builtin import select as select_tools
from ..tools.builtin import with_mcp
from ..tools.host import ToolError, make_runtime
from ..transport import AT_SHUTDOWN, HttpServer, TransportError, announce_listening
from . import offload
from .args import build_parser
from .classify import draft_inert_notices, load_mode, refusals, spec_types
from .projector import ProjectorRefused, load_projector
from .webui_build import built_dist

log = logging.getLogger("mlxcel")
AUTO_SLOTS = 4  # b10621's --parallel -1 (auto) serves 4 slots


def _n_embd(checkpoint) -> int:
    return int(read_config(checkpoint).get("hidden_size") or 0)


class StartupRefusal(Exception):
    """A model that cannot be served with this command line: the one line to print, then exit 1."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


def build_state(args, prog: str, auth, cors, vertex, ranks=None):  # noqa: C901
    """Everything one model is served with, from a parsed command line: the checkpoint, tokenizer, engine, chat
    settings and the request defaults. The engine starts (its model loading on its own thread) as soon as it
    exists, while the rest is read; a later refusal stops it. Raises StartupRefusal."""
    try:
        overrides = kv_override.parse([args.override_kv]) if args.override_kv else ()
        checkpoint = resolve_model(args.model, overrides)
        read_config(checkpoint)  # a damaged checkpoint is one line here, not a traceback later
    except (ModelNotFound, RuntimeError, ValueError) as exc:
        raise StartupRefusal(f"{prog}: error: {exc}") from None

    if args.check_tensors:  # b10621's loader checks every tensor's values before it loads one
        bad = check_tensors(args.model, checkpoint)
        if bad:
            raise StartupRefusal("\n".join([*bad, f"{prog}: error: error loading model: {tensor_check.MESSAGE}"]))
    refused = offload.resolve(args.given, checkpoint)  # placement on MLX's device (-ngl needs the layer count)
    if refused:
        raise StartupRefusal(refused)
    try:
        tokenizer = ModelTokenizer(checkpoint)
    except Exception as exc:  # a damaged tokenizer file: the tokenizers library's own error, on one line
        raise StartupRefusal(
            f"{prog}: error: cannot load the model's tokenizer from {checkpoint}: {exc}".replace("\n", " ")
        ) from None
    n_slots = args.parallel if args.parallel > 0 else AUTO_SLOTS

    try:
        encoder = encoder_config(args, checkpoint, n_slots)
    except EncoderModeError as exc:
        raise StartupRefusal(str(exc)) from None

    try:
        lora = lora_adapters(args)
        control_vectors = scaled_files(args.control_vector_args, "control-vector")
        if control_vectors:  # the files read now: a bad one fails before the model loads
            control_vector.load(control_vectors)
        given_range = args.control_vector_layer_range
        layers = (stoi(given_range[0]), stoi(given_range[1])) if given_range else (0, 0)
    except ValueError as exc:
        raise StartupRefusal(f"{prog}: error: {exc}") from None
    if encoder is not None and (lora or control_vectors):
        raise StartupRefusal(
            f"{prog}: error: {'--lora' if lora else '--control-vector'}: adapters and control "
            "vectors steer a generating model; mlxcel serves embeddings and reranking without them"
        )
    try:
        projector = (
            None if encoder is not None else load_projector(args, checkpoint, _n_embd(checkpoint), ranks is not None)
        )
    except ProjectorRefused as exc:
        raise StartupRefusal(str(exc)) from None
    spec_types, draft = speculative_config(args, tokenizer, prog)
    ngram_simple = ngram_simple_config(args) if "ngram-simple" in spec_types else None
    ngram = ngram_config(args, spec_types, prog)
    if encoder is not None:
        engine: Engine | EncoderWorker = EncoderWorker(checkpoint, encoder)
        log.warning(
            "%s mode (pooling %s): the completion and chat routes answer 501 here, where b10621 runs "
            "them against the encoder and fails each with a 500",
            encoder.mode,
            encoder.pooling,
        )
    else:
        kv = kv_numerics(args)
        refused = kv.refusal(head_dim(read_config(checkpoint)))  # (b10621's llama_init_from_model checks)
        if refused:
            raise StartupRefusal(refused)
        engine = Engine(
            checkpoint,
            EngineConfig(
                n_ctx=slot_context(args.ctx_size, 0 if unified_kv(args) else args.parallel),
                n_slots=n_slots,
                n_batch=args.batch_size,
                cont_batching=args.cont_batching,
                ubatch=args.ubatch_size,
                cache_prompt=args.cache_prompt,
                cache_ram_mib=args.cache_ram,
                slot_similarity=args.slot_prompt_similarity,
                cache_idle_slots=args.cache_idle_slots,
                kv_unified=unified_kv(args),
                mlock=load_mode(args.given)[0] in ("mlock", "mmap+mlock"),
                ctx_shift=args.context_shift,
                add_bos=tokenizer.add_bos,
                special=args.special,
                sleep_idle_seconds=args.sleep_idle_seconds,
                rope=rope_overrides(args),
                yarn=yarn_flags(args),
                lora=lora,
                lora_fuse=bool(args.lora_fuse),
                control_vectors=control_vectors,
                control_vector_layers=layers,
                draft=draft,
                ngram_simple=ngram_simple,
                ngram=ngram,
                kv=kv,
                ctx_checkpoints=args.ctx_checkpoints,
                checkpoint_min_step=args.checkpoint_min_step,
                swa_full=args.swa_full,
                ranks=ranks,
            ),
            eog_ids=tokenizer.eog_ids,
            piece=tokenizer.piece,
            end_token=lambda: tokenizer.eos_id if tokenizer.eot_id is None else tokenizer.eot_id,
            encode_media=None if projector is None else projector.encode,
        )
        if any(g.option in ("--pooling", "--embd-normalize") for g in args.given):
            log.warning(
                "--pooling and --embd-normalize shape embeddings only: without --embeddings they change nothing"
            )
    engine.start()
    try:
        return _settled_state(
            args, prog, auth, cors, vertex, checkpoint, tokenizer, engine, encoder, spec_types, projector
        )
    except BaseException:
        engine.stop(wait=30)
        raise


def web_ui(args) -> WebUI:
    """--ui/--no-ui (on by default), the assets `mlxcel webui` built, and --ui-config / --ui-config-file (the
    later one given wins, as both set b10621's ui_config_json); JSON that does not parse is b10621's error."""
    text = None
    for given in args.given:
        if given.option == "--ui-config":
            text = given.value
        elif given.option == "--ui-config-file":
            text = Path(given.value).read_text(encoding="utf-8", errors="replace")
    settings = {}
    if text:  # (b10621 parses a non-empty string only)
        try:
            settings = json.loads(text)
        except ValueError as exc:
            raise StartupRefusal(f"load_model: failed to parse UI config: {exc}") from None
    dist = built_dist() if args.ui else None
    if args.ui and dist is None:
        log.warning(
            "web UI: not built; `mlxcel webui` builds llama.cpp's UI from the pinned sdist (npm), / then serves it"
        )
    return WebUI(enabled=bool(args.ui), dist=dist, settings=settings)


def _settled_state(args, prog, auth, cors, vertex, checkpoint, tokenizer, engine, encoder, spec_types, projector):
    """build_state's second half, read while the engine loads the model."""
    try:
        sampling = sampling_defaults(args, tokenizer.eog_ids)
    except ValueError as exc:
        raise StartupRefusal(f"error: {exc}") from None
    try:
        chat = None if encoder is not None else chat_settings(args, tokenizer)
        if chat is not None and projector is not None:
            audio = getattr(projector, "modality", "image") == "audio"
            chat = dataclasses.replace(chat, allow_image=not audio, allow_audio=audio, media_marker=media_marker())
    except UnsupportedTemplate as exc:  # b10621's own sentence, printed as it prints it
        raise StartupRefusal(str(exc)) from None
    except ValueError as exc:
        raise StartupRefusal(f"error: {exc}") from None
    tools, tools_on = enabled_tools(args)
    ui = web_ui(args)
    if args.path and ui.enabled and not os.path.isdir(args.path):  # b10621's init, before anything listens
        raise StartupRefusal(
            f"srv          init: static assets path not found: {args.path}\n"
            "srv  llama_server: failed to initialize HTTP server"
        )
    settings = ServerSettings(
        chat=chat,
        encoder=encoder,
        endpoint_slots=args.slots,
        endpoint_props=args.props,
        endpoint_metrics=args.metrics,
        slot_save_path=args.slot_save_path or "",
        mcp_proxy=agent_features(args)[1],
        tools=tools,
        tools_on=tools_on,
        tools_runtime=tools_runtime(args, tools_on),
        prompts_log_dir=args.log_prompts_dir or "",
        vertex=vertex,
        n_batch=args.batch_size,
        special=args.special,
        spm_infill=args.spm_infill,
        base_params=TaskParams(
            **sampling,
            cache_prompt=args.cache_prompt,
            n_keep=args.keep,
            verbose=LogConfig.from_args(args).verbosity > 9,
            n_cache_reuse=args.cache_reuse,
            sse_ping_interval=args.sse_ping_interval,
            n_predict=args.predict,
            speculative_types=",".join(spec_types),
            reasoning_budget_tokens=args.reasoning_budget,
            stop=list(args.reverse_prompt or []),
            # auto resolves to deepseek in b10621's task defaults
            reasoning_format="deepseek" if args.reasoning_format == "auto" else args.reasoning_format,
        ),
        slots_debug=bool(int(os.environ.get("LLAMA_SERVER_SLOTS_DEBUG", "0") or 0)),
        cors=tools_cors(args, cors, tools_on),
        auth=auth,
        api_prefix=args.api_prefix or "",
        webui=ui,
        static_path=args.path or "",
        projector=projector,
        media_path=args.media_path or "",
    )
    features = [
        name
        for name, on in (
            ("MCP proxy", settings.mcp_proxy),
            ("server tools", any(t.kind == "server" for t in settings.tools)),
            ("MCP servers", any(t.kind == "mcp" for t in settings.tools)),
        )
        if on
    ]
    if features:  # b10621's warning, as it prints it
        log.warning("srv    llama_server: -----------------")
        log.warning("srv    llama_server: the following feature(s) are enabled:")
        for name in features:
            log.warning("srv    llama_server:     %s (experimental)", name)
        log.warning("srv    llama_server: do not expose the server to untrusted environments")
        log.warning("srv    llama_server: -----------------")
    # b10621 serves its sorted alias set's first, else the model path as given (a GGUF: reported as given)
    gguf = Path(args.model) if args.model.endswith(".gguf") and Path(args.model).is_file() else None
    hf_name = getattr(args, "hf_model_name", None)  # -hf: the repository spec (server/cli/main.py)
    model_name = args.alias[0] if args.alias else hf_name or (args.model if gguf else checkpoint.name)
    if encoder is not None:
        ftype = encoder_ftype(checkpoint)
    else:
        ftype = model_ftype(checkpoint)

    state = AppState(
        engine=engine,
        tokenizer=tokenizer,
        model_name=model_name,
        settings=settings,
        model_path=str(gguf or checkpoint),
        model_ftype=ftype,
        model_aliases=tuple(args.alias or ()),
        model_tags=tuple(args.tags or ()),
        model_facts=model_facts(checkpoint),
        slot_identity=Identity.of(checkpoint) if args.slot_save_path else None,
    )
    return state


# what mlxcel does not serve across ranks (backends/distributed.py): refused on every rank before anything loads
NOT_ACROSS_RANKS = {
    "--lora": "LoRA adapters",
    "--lora-scaled": "LoRA adapters",
    "--control-vector": "control vectors",
    "--control-vector-scaled": "control vectors",
    "--spec-draft-model": "a draft model",
    "--slot-save-path": "slot files (each rank holds its own part of a slot's cache)",
    "--embedding": "embeddings",
    "--rerank": "reranking",
}


def ranks_refusal(args, prog: str) -> str | None:
    """The one line a launch over several ranks is refused with, or None."""
    if not args.model:
        return f"{prog}: error: router mode (no -m) is not served across ranks: give every rank -m MODEL"
    for g in args.given:
        if g.option in NOT_ACROSS_RANKS:
            return f"{prog}: error: {g.source}: {NOT_ACROSS_RANKS[g.option]} are not served across ranks"
    if args.sleep_idle_seconds > 0:
        return f"{prog}: error: --sleep-idle-seconds: a model split across ranks is not unloaded while idle"
    return None


def serve_launched(args, argv: list[str], prog: str, serve_config, auth, cors, vertex) -> int:
    """The server this process is: one model (-m), b10621's router mode (no -m: models served on demand from the
    store, --models-dir, presets), or, launched by mlx.launch over several ranks, rank 0 serving a model split over
    them or another rank computing its part (docs/scaling-out.md)."""
    ranks = world()
    unfit = split_refusal(args.tp_size, args.pp_size, ranks.size if ranks is not None else 1)
    if unfit:
        print(f"{prog}: error: {unfit}", file=sys.stderr)
        return 1
    if ranks is not None:
        refused = ranks_refusal(args, prog)
        if refused:
            print(refused, file=sys.stderr)
            return 1
        ranks = dataclasses.replace(ranks, split=split_of(args.pp_size))
        log.info("rank %d of %d: %s parallel", ranks.rank, ranks.size, ranks.split)
        if ranks.rank != 0:
            return serve_rank(args, prog, ranks)
    if args.model:
        return serve_model(args, prog, serve_config, auth, cors, vertex, ranks)
    return serve_models(args, argv, prog, serve_config, auth, cors)


def serve_rank(args, prog: str, ranks) -> int:
    """A rank other than 0 of a launch over several ranks: its part of the model, each pass rank 0 sends it
    (backends/distributed.py follow), until rank 0 stops; no HTTP here."""
    try:
        overrides = kv_override.parse([args.override_kv]) if args.override_kv else ()
        checkpoint = resolve_model(args.model, overrides)
    except (ModelNotFound, RuntimeError, ValueError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    kv, rope, yarn = kv_numerics(args), rope_overrides(args), yarn_flags(args)
    try:
        backend = load_sharded(checkpoint, ranks, n_batch=args.batch_size, kv=kv, rope=rope, yarn=yarn)
    except BackendRefusal as exc:  # (rank 0 refuses the same in its own line)
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    log.info("rank %d of %d: serving rank 0's passes", ranks.rank, ranks.size)
    mine = sharded_fingerprint(checkpoint, args.batch_size, kv, rope, yarn, ranks.split)
    status = follow(backend, Channel(ranks), mine)
    if status == 0:
        log.info("rank %d of %d: stopped by rank 0", ranks.rank, ranks.size)
    return status


def serve_model(args, prog: str, serve_config, auth, cors, vertex, ranks=None) -> int:
    """Serve the model -m names until the server stops; the exit status. ranks: launched by mlx.launch, rank 0
    of them (the model split over every rank)."""
    blas.verify()
    # a reference BLAS (or a failed interposition) makes every request ~50x slower: say it as a warning
    (log.info if blas.STATE.fast else log.warning)(blas.describe())
    try:
        state = build_state(args, prog, auth, cors, vertex, ranks)
    except StartupRefusal as exc:
        print(exc.text, file=sys.stderr)
        return 1
    engine = state.engine  # started: the model loads on the engine's thread while the HTTP layer is built here
    # deferred: FastAPI and the routes (~0.35 s of imports) load while the engine loads the model
    from ..api.app import create_app
    from ..api.vertex import RouteConflict

    try:
        app = create_app(state)
    except RouteConflict as exc:  # AIP_PREDICT_ROUTE naming one of the server's own routes: b10621 exits
        print(exc, file=sys.stderr)
        engine.stop(wait=30)
        return 1
    try:  # bound while the model loads, as b10621 binds first; "listening on" only once it has loaded
        server = HttpServer(app, serve_config, announce=None, uvicorn_options=uvicorn_log_settings())
    except TransportError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        engine.stop(wait=30)
        return 1

    def _exit_on_load_failure() -> None:
        engine.ready.wait()
        if engine.load_error:
            log.error("exiting: %s", engine.load_error)
            server.stop()
        else:
            announce_listening(server.address)

    def _exit_on_lost_backend() -> None:  # (a rank of a split model gone: every request 503, then the stop)
        engine.lost_event.wait()
        log.error("exiting: %s", engine.lost)
        server.stop()

    threading.Thread(target=_exit_on_load_failure, daemon=True).start()
    threading.Thread(target=_exit_on_lost_backend, daemon=True).start()
    try:
        server.run()
    finally:  # the engine thread ends its step before the interpreter tears down what it computes with
        leader = engine.backend if ranks is not None else None  # (the other ranks stop with rank 0)
        engine.stop(wait=30)
        if leader is not None and hasattr(leader, "stop"):
            leader.stop()
    return 1 if engine.load_error or engine.lost else 0


def serve_models(args, argv: list[str], prog: str, serve_config, auth, cors) -> int:
    """b10621's router mode (no -m): models served on demand from the store, --models-dir and presets, each
    loaded by router_model."""
    try:
        tools, tools_on = enabled_tools(args)
        runtime = tools_runtime(args, tools_on)
    except StartupRefusal as exc:
        print(exc.text, file=sys.stderr)
        return 1
    cors = tools_cors(args, cors, tools_on)
    from ..router.serve import serve_router  # deferred: as serve_model's HTTP layer

    return serve_router(
        args,
        argv,
        prog,
        serve_config,
        auth,
        cors,
        lambda entry, model_argv: router_model(entry, model_argv, prog),
        web_ui(args),
        (tools, tools_on, agent_features(args)[1], runtime),
    )


def router_model(entry, model_argv: list[str], prog: str) -> Loaded:
    """One model of the router's pool, served in this process as a model started with that command line would
    be."""
    parser = build_parser(prog)
    try:
        args = parser.parse_args(model_argv)
    except SystemExit as exc:
        raise RuntimeError(f"the model's command line does not parse: {' '.join(model_argv)}") from exc
    refused = refusals(args.given)
    if refused:
        raise RuntimeError("; ".join(refused))
    try:
        # the router checks keys, answers preflights and strips the prefix: the model's own routes do none
        state = build_state(args, prog, AuthConfig(), None, None)
    except StartupRefusal as exc:
        raise RuntimeError(exc.text) from None
    state.settings = dataclasses.replace(state.settings, api_prefix="")
    from ..api.app import create_app  # deferred: as serve_model's
    from ..api.models import model_info  # deferred: FastAPI, as create_app

    app = create_app(state)
    engine = state.engine  # started by build_state
    engine.ready.wait()
    if engine.load_error:
        engine.stop(wait=30)
        raise RuntimeError(engine.load_error)
    # the preset's stop-timeout bounds how long the engine may take to end its step (b10621: before a force-kill)
    return Loaded(
        app=app,
        info=model_info(state),
        stop=lambda: engine.stop(wait=entry.stop_timeout),
        sleeping=lambda: bool(getattr(engine, "sleeping", False)),
    )


def scaled_files(given, what: str) -> tuple[tuple[str, float], ...]:
    """--lora / --lora-scaled, or --control-vector / --control-vector-scaled, in command-line order (b10621
    appends both spellings to one list): each file with its scale (1 for the unscaled spelling)."""
    out = []
    for option, _, value in given or []:
        for item in parse_csv_row(value):
            if option == f"--{what}":
                out.append((item, 1.0))
            else:
                path, text = item.split(":")  # the format was checked by the parser
                out.append((path, check_scale(text, what.replace("-", " "))))
    return tuple(out)


def speculative_config(args, tokenizer, prog: str):
    """(--spec-type's types as b10621 accumulates them, the draft model's DraftConfig or None). Drafting needs
    both a draft model and draft-simple; b10621 logs and serves without it where one is missing or the draft's
    vocabulary is not the target's, and so does mlxcel. Raises StartupRefusal for a draft it cannot load."""
    types = given_spec_types(args)
    model = args.spec_draft_model or ""
    for line in draft_inert_notices(args.given):
        log.info("draft model: %s", line)
    if types == ["none"] and model:
        types = types_from_gguf(model) or types
    head = next((t for t in ("draft-eagle3", "draft-dflash", "draft-dspark") if t in types), None)
    if head is not None:
        if "draft-simple" not in types:
            return types, head_config(args, model, prog, head)
        log.warning("draft-simple and %s read one draft model: mlxcel drafts with draft-simple", head)
    elif "draft-mtp" in types and "draft-simple" not in types:
        return types, mtp_config(args, model, prog)
    if "draft-simple" not in types:
        if model:
            log.warning(
                "a draft model without --spec-type draft-simple drafts nothing (b10621 loads it and "
                "leaves it unused; mlxcel does not load it)"
            )
        return types, None
    return types, draft_model_config(args, model, tokenizer, prog)


def draft_model_config(args, model: str, tokenizer, prog: str) -> DraftConfig | None:
    """draft-simple's draft model: None (logged) where none is given or its vocabulary is not the target's."""
    if not model:
        log.error("failed to initialize speculative decoding context: draft-simple requires a draft context")
        return None
    try:
        checkpoint = resolve_model(model)
        draft_tokenizer = ModelTokenizer(checkpoint)
    except (ModelNotFound, RuntimeError, ValueError, OSError) as exc:
        raise StartupRefusal(f"{prog}: error: failed to load draft model, '{model}': {exc}") from None
    mismatch = vocab_mismatch(tokenizer, draft_tokenizer)
    if mismatch:
        log.error("the target and draft vocabs are not compatible (%s): speculative decoding is off", mismatch)
        return None
    return DraftConfig(
        str(checkpoint),
        n_max=args.spec_draft_n_max,
        n_min=args.spec_draft_n_min,
        p_min=stof(args.spec_draft_p_min),
        kv=kv_numerics(args, draft=True),
    )


def given_spec_types(args) -> list[str]:
    """--spec-type's types as b10621 accumulates them (--spec-default's ngram-mod where it stands)."""
    types = ["none"]
    for g in args.given:
        if g.option == "--spec-type":
            types += spec_types(g.value)
        elif g.option == "--spec-default":
            types.append("ngram-mod")
    return types


def mtp_config(args, model: str, prog: str) -> DraftConfig:
    """--spec-type draft-mtp: the target's own MTP block (b10621 builds the MTP draft context on the target model
    when no -md is given) and the draft tuning."""
    if model:
        raise StartupRefusal(
            f"{prog}: error: failed to load draft model, '{model}': an MTP draft model of its own (-md with draft-mtp) "
            "is not served by mlxcel yet: leave -md out to draft with the model's own MTP layers"
        )
    return DraftConfig(
        "",
        n_max=args.spec_draft_n_max,
        n_min=args.spec_draft_n_min,
        p_min=stof(args.spec_draft_p_min),
        kv=kv_numerics(args, draft=True),
        kind="draft-mtp",
    )


def types_from_gguf(model: str) -> list[str]:
    """common_speculative_types_from_gguf: the type a draft GGUF names when --spec-type is left at its default
    (a DFlash draft: draft-dflash, or draft-dspark with a Markov head; a model whose last block is an MTP one:
    draft-mtp); [] for any other file."""
    from ..models.gguf_reader import FastGGUFReader  # deferred: gguf-py, read only for a draft GGUF

    try:
        reader = FastGGUFReader(model)
    except (OSError, ValueError, IndexError):
        return []
    field = reader.fields.get("general.architecture")
    arch = field.contents() if field is not None else None
    names = {t.name for t in reader.tensors}
    if arch == "dflash":
        return ["draft-dspark" if "markov_w1.weight" in names else "draft-dflash"]
    blocks = reader.fields.get(f"{arch}.block_count")
    if blocks is not None and f"blk.{int(blocks.contents()) - 1}.nextn.eh_proj.weight" in names:
        return ["draft-mtp"]
    return []


HEAD_FILES = {"draft-eagle3": "an EAGLE-3 head", "draft-dflash": "a DFlash draft", "draft-dspark": "a DSpark draft"}


def head_config(args, model: str, prog: str, kind: str) -> DraftConfig | None:
    """--spec-type draft-eagle3, draft-dflash or draft-dspark with -md: the head's GGUF (a local file) and the draft tuning;
    without -md b10621 serves without it (no draft context: the type is skipped), as mlxcel does, saying so."""
    if not model:
        log.error("failed to initialize speculative decoding context: %s requires a draft context", kind)
        return None
    path = Path(model)
    if not path.is_file():
        raise StartupRefusal(f"{prog}: error: failed to load draft model, '{model}': {HEAD_FILES[kind]} is a GGUF file")
    return DraftConfig(
        str(path),
        n_max=args.spec_draft_n_max,
        n_min=args.spec_draft_n_min,
        p_min=stof(args.spec_draft_p_min),
        kv=kv_numerics(args, draft=True),
        kind=kind,
    )


def agent_features(args) -> tuple[list[str], bool]:
    """--tools, --ui-mcp-proxy and -ag / -no-ag in command-line order, as b10621's handlers set them: the built-in
    tools asked for (parse_csv_row) and whether the CORS proxy is on."""
    tools: list[str] = []
    proxy = False
    for given in args.given:
        if given.option == "--tools":
            tools = parse_csv_row(given.value)
        elif given.option == "--ui-mcp-proxy":
            proxy = bool(given.value)
        elif given.option == "--agent":
            tools, proxy = (["all"], True) if given.value else ([], False)
    return tools, proxy


def enabled_tools(args) -> tuple[tuple, bool]:
    """The tools /tools serves and whether it is on (b10621: built-in tools asked for, or MCP servers configured):
    --tools / -ag's built-in tools, then the MCP servers' (started once now to list theirs, as b10621's warm-up);
    StartupRefusal with b10621's words for an unknown tool name or an MCP configuration it cannot read."""
    names, _ = agent_features(args)
    try:
        configs = mcp.load_configs(args.mcp_servers_config, args.mcp_servers_json)
    except mcp.MCPConfigError as exc:
        raise StartupRefusal(f"srv    llama_server: MCP starting failed: {exc}") from None
    try:
        tools = select_tools(names) if names else []
    except ValueError as exc:
        raise StartupRefusal(f"srv    llama_server: tools setup failed: {exc}") from None
    if configs:
        manager = mcp.Manager(configs)
        manager.warm_up()
        atexit.register(manager.shutdown)  # (the sessions opened by calls end with the server)
        AT_SHUTDOWN.append(manager.stopping.set)  # a call in flight gives up at the first signal, as b10621's
        tools = with_mcp(tools, manager)
    return tuple(tools), bool(names or configs)


def tools_runtime(args, tools_on: bool):
    """--tools-runtime where /tools is on (b10621 sets it up with the tools): a container it runs, or a target
    it names; StartupRefusal with b10621's words for one it cannot use."""
    if not (args.tools_runtime and tools_on):
        return None
    try:
        runtime = make_runtime(args.tools_runtime)
    except ToolError as exc:
        raise StartupRefusal(f"srv    llama_server: tools setup failed: {exc}") from None
    atexit.register(runtime.close)  # (the container it ran stops with the server)
    return runtime


def tools_cors(args, cors, tools_on: bool):
    """b10621's default CORS origin with built-in tools on: localhost, unless --cors-origins was given."""
    if cors is None or not tools_on or any(g.option == "--cors-origins" for g in args.given):
        return cors
    log.warning(
        "server tools or MCP servers are enabled, using localhost as default CORS origin (change via --cors-origins)"
    )
    return dataclasses.replace(cors, origins="localhost")


def kv_numerics(args, draft: bool = False):
    """-ctk, -ctv (-ctkd, -ctvd for the draft) and -fa as b10621 applies them (the last given wins; classify
    refuses the types mlxcel does not store)."""
    names = ("--spec-draft-type-k", "--spec-draft-type-v") if draft else ("--cache-type-k", "--cache-type-v")
    last = {g.option: g.value for g in args.given}
    return KVNumerics.from_flags(last.get(names[0]), last.get(names[1]), last.get("--flash-attn"))


def yarn_flags(args):
    """--rope-scaling yarn and the --yarn-* values, as given (server.models.yarn resolves them)."""
    return YarnFlags(
        scaling_yarn=args.rope_scaling == "yarn",
        ext_factor=stof(args.yarn_ext_factor),
        attn_factor=stof(args.yarn_attn_factor),
        beta_fast=stof(args.yarn_beta_fast),
        beta_slow=stof(args.yarn_beta_slow),
        orig_ctx=int(args.yarn_orig_ctx or 0),
    )


def ngram_config(args, types: list[str], prog: str) -> NgramDrafters:
    """The stateful n-gram drafters --spec-type (or --spec-default) turns on, with their tuning as b10621's
    handlers leave it (the last value given; --spec-default sets ngram-mod's where it stands). A lookup cache that
    cannot be read stops the start in one line (b10621 aborts)."""

    def map_params(kind: str) -> MapParams:
        key = f"spec_ngram_{kind}_"
        return MapParams(
            int(getattr(args, key + "size_n")), int(getattr(args, key + "size_m")), int(getattr(args, key + "min_hits"))
        )

    cache = None
    if "ngram-cache" in types:
        paths = {"static": args.lookup_cache_static or "", "dynamic": args.lookup_cache_dynamic or ""}
        tables = {}
        for which, path in paths.items():
            try:
                tables[which] = load_lookup_cache(Path(path)) if path else {}
            except (OSError, LookupCacheError):
                raise StartupRefusal(f"{prog}: error: failed to open {which} lookup cache: {path}") from None
        cache = CacheParams(paths["static"], paths["dynamic"], (tables["static"], tables["dynamic"]))
    return NgramDrafters(
        map_k=map_params("map_k") if "ngram-map-k" in types else None,
        map_k4v=map_params("map_k4v") if "ngram-map-k4v" in types else None,
        mod=ModParams(int(args.spec_ngram_mod_n_match), int(args.spec_ngram_mod_n_min), int(args.spec_ngram_mod_n_max))
        if "ngram-mod" in types
        else None,
        cache=cache,
    )


def ngram_simple_config(args) -> tuple[int, int]:
    """--spec-ngram-simple-size-n / -size-m (b10621's defaults 12 and 48)."""
    n, m = args.spec_ngram_simple_size_n, args.spec_ngram_simple_size_m
    return (12 if n is None else int(n), 48 if m is None else int(m))


def rope_overrides(args) -> tuple[float | None, float | None]:
    """(freq_base, freq_scale) over the checkpoint's, as llama_context resolves them: 0 means the model's; the
    last of --rope-scale N (1/N) and --rope-freq-scale N wins; --rope-scaling none never scales."""
    base = stof(args.rope_freq_base) if args.rope_freq_base is not None else 0.0
    scale = 0.0
    for option, _, value in args.rope_scale_args or []:
        scale = 1.0 / stof(value) if option == "--rope-scale" else stof(value)
    if args.rope_scaling == "none":
        scale = 1.0
    return (base or None, scale or None)


def check_tensors(model: str, checkpoint: Path) -> list[str]:
    """--check-tensors: a GGUF given with -m as its file holds the tensors, anything else as its checkpoint's
    safetensors (server/models/tensor_check.py); b10621's lines for each tensor with invalid data."""
    source = Path(model)
    if source.suffix == ".gguf" and source.is_file():
        return tensor_check.check_gguf(source)
    return tensor_check.check_checkpoint(checkpoint)


def unified_kv(args) -> bool:
    """b10621's kv_unified: -kvu, or -np auto (which sets it whatever -no-kvu said: server.cpp). Each slot then
    has the whole context (llama_context: n_ctx_seq = n_ctx) and idle slots are cleared at each launch."""
    return args.parallel <= 0 or bool(args.kv_unified)


def slot_context(ctx_size: int, parallel: int) -> int:
    """Each slot's context, as llama_context sizes it: -c rounded up to a multiple of 256; with an explicit
    --parallel N (b10621's KV then per sequence, not unified) that divided by N and rounded up again. 0: the
    model's training context, whatever N."""
    if ctx_size <= 0:
        return 0

    def pad(n: int) -> int:
        return (n + 255) // 256 * 256

    return pad(pad(ctx_size) // parallel) if parallel > 0 else pad(ctx_size)


def lora_adapters(args) -> tuple[tuple[str, float], ...]:
    """--lora and --lora-scaled; a path that does not exist fails here, before the model loads."""
    out = scaled_files(args.lora_args, "lora")
    for path, _ in out:
        if not os.path.exists(path):
            raise ValueError(f"failed to load lora adapter '{path}': no such file or directory")
    return out


def sampling_defaults(args, eog_ids: frozenset[int] = frozenset()) -> dict:  # noqa: C901
    """The command line's sampling settings as request defaults, checked as common/arg.cpp checks them."""
    if args.repeat_last_n < 0:
        raise ValueError(f"invalid repeat-last-n = {args.repeat_last_n}")
    rp = f32(args.repeat_penalty)
    if not math.isfinite(rp) or rp <= 0 or not math.isfinite(f32(1 / rp)):
        raise ValueError("repeat-penalty must be finite and greater than 0")
    for name, v in (("presence-penalty", args.presence_penalty), ("frequency-penalty", args.frequency_penalty)):
        if not math.isfinite(f32(v)):
            raise ValueError(f"{name} must be finite")
    out = {
        "seed": args.seed,
        "temperature": max(f32(args.temp), 0.0),
        "top_k": args.top_k,
        "top_p": f32(args.top_p),
        "min_p": f32(args.min_p),
        "top_n_sigma": f32(args.top_nsigma),
        "xtc_probability": f32(args.xtc_probability),
        "xtc_threshold": f32(args.xtc_threshold),
        "typical_p": f32(args.typical),
        "repeat_last_n": args.repeat_last_n,
        "repeat_penalty": rp,
        "presence_penalty": f32(args.presence_penalty),
        "frequency_penalty": f32(args.frequency_penalty),
        "dynatemp_range": f32(args.dynatemp_range),
        "dynatemp_exponent": f32(args.dynatemp_exp),
        "mirostat": args.mirostat,
        "mirostat_eta": f32(args.mirostat_lr),
        "mirostat_tau": f32(args.mirostat_ent),
    }
    if args.dry_penalty_last_n < 0:
        raise ValueError(f"invalid dry-penalty-last-n = {args.dry_penalty_last_n}")
    out.update(
        dry_multiplier=f32(args.dry_multiplier),
        dry_allowed_length=args.dry_allowed_length,
        dry_penalty_last_n=args.dry_penalty_last_n,
    )
    if f32(args.dry_base) >= 1:  # a smaller base keeps the default
        out["dry_base"] = f32(args.dry_base)
    if args.dry_sequence_breaker is not None:  # any use clears the defaults; "none" clears what came before
        breakers: list[str] = []
        for b in args.dry_sequence_breaker:
            breakers = [] if b == "none" else [*breakers, b]
        out["dry_sequence_breakers"] = breakers
    if args.samplers is not None:  # the later of --samplers / --sampler-seq wins in b10621; names first here
        out["samplers"] = [SAMPLER_NAMES[n.lower()] for n in args.samplers.split(";") if n.lower() in SAMPLER_NAMES]
    if args.sampler_seq is not None:
        out["samplers"] = [SAMPLER_CHARS[c] for c in args.sampler_seq if c in SAMPLER_CHARS]
    bias = []
    for raw in args.logit_bias or []:
        m = re.fullmatch(r"\s*([+-]?\d+)\s*([+-])(.*)", raw, re.DOTALL)
        try:
            if not m:
                raise ValueError
            bias.append((int(m.group(1)), f32(float(m.group(3).strip().split()[0]) * (-1 if m.group(2) == "-" else 1))))
        except (ValueError, IndexError):
            raise ValueError(f"invalid input format for --logit-bias '{raw}'") from None
    out.update(adaptive_target=f32(args.adaptive_target), adaptive_decay=f32(args.adaptive_decay))
    if args.ignore_eos:  # the end-of-generation bans join the default biases, as common_init does
        out["ignore_eos"] = True
        bias += [(t, float("-inf")) for t in sorted(eog_ids)]
    if bias:
        out["logit_bias"] = bias
    if args.backend_sampling:  # echoed as b10621 echoes it; the draw is the common chain's either way
        out["backend_sampling"] = True
        log.warning(
            "--backend-sampling: mlxcel samples every request with b10621's CPU sampler chain; "
            "there is no backend sampler, so seeded draws follow the CPU chain"
        )
    grammar = _grammar_default(args.grammar_args or [])
    if grammar:
        out["grammar"] = grammar
    return out


class UnsupportedTemplate(ValueError):
    """A --chat-template(-file) the legacy built-ins cannot format under --no-jinja."""


def chat_settings(args, tokenizer):
    """--chat-template / --chat-template-file (the last given wins, as upstream's handlers run in order),
    --chat-template-kwargs, --prefill-assistant and --jinja, checked as b10621's handlers check them."""
    given = args.chat_template_args or []
    override = ""
    for option, spelling, value in given:
        if option == "--chat-template-file":
            try:
                value = Path(value).read_text(encoding="utf-8", errors="replace")
            except OSError:
                raise ValueError(
                    f"error while handling argument \"{spelling}\": error: failed to open file '{value}'"
                ) from None
        elif args.jinja and value in LEGACY_TEMPLATES and value != "chatml":
            raise ValueError(
                f"{spelling} {value}: '{value}' names one of b10621's built-in chat templates, which "
                "it renders only without Jinja (under --jinja the name itself would become every "
                "prompt): add --no-jinja for the built-in formatting, or pass Jinja template text "
                "or a file with --chat-template-file"
            )
        if not args.jinja and not verify_legacy(value):  # common_chat_verify_template, at argument parsing
            raise UnsupportedTemplate(unsupported_template_message(value, use_jinja=False))
        override = value
    template = default_template_source(override, tokenizer.chat_template or "")
    kwargs, enable_reasoning = _template_kwargs(args.template_kwargs_args or [])
    piece = lambda i: tokenizer.piece(i).decode("utf-8", "replace") if i is not None else ""  # noqa: E731
    if args.reasoning_budget < -1:
        raise ValueError('error while handling argument "--reasoning-budget": invalid value')
    if args.reasoning_format not in REASONING_FORMATS:
        raise ValueError(
            f'error while handling argument "--reasoning-format": Unknown reasoning format: {args.reasoning_format}'
        )
    # b10621 thinks by default only where its autoparser finds thinking markers in the template
    supports_thinking = args.jinja and template_supports_thinking(
        template, piece(tokenizer.bos_id), piece(tokenizer.eos_id)
    )
    return ChatSettings(
        template=template,
        bos_token=piece(tokenizer.bos_id),
        eos_token=piece(tokenizer.eos_id),
        prefill_assistant=args.prefill_assistant,
        template_kwargs=kwargs,
        skip_chat_parsing=args.skip_chat_parsing,
        reasoning_budget=args.reasoning_budget,
        add_bos=tokenizer.add_bos,
        add_eos=tokenizer.add_eos,
        use_jinja=args.jinja,
        reasoning_budget_message=args.reasoning_budget_message,
        enable_thinking=enable_reasoning != 0 and supports_thinking,
    )


def _template_kwargs(given: list) -> tuple[dict[str, str], int]:  # noqa: C901
    """--chat-template-kwargs, --reasoning, --reasoning-effort and --reasoning-preserve in command-line
    order, each writing b10621's default_template_kwargs as its handler does (values as JSON text)."""
    kwargs: dict[str, str] = {}
    enable_reasoning = -1
    for option, spelling, value in given:
        if option == "--chat-template-kwargs":
            try:
                parsed = json.loads(value)
                if not isinstance(parsed, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                raise ValueError(f'error while handling argument "{spelling}": {e}') from None
            kwargs.update({k: json.dumps(v, ensure_ascii=False) for k, v in parsed.items()})
        elif option == "--reasoning":
            if value in ("on", "enabled", "true", "1"):
                enable_reasoning, kwargs["enable_thinking"] = 1, "true"
            elif value in ("off", "disabled", "false", "0"):
                enable_reasoning, kwargs["enable_thinking"] = 0, "false"
            elif value in ("auto", "-1"):
                enable_reasoning = -1
            else:
                raise ValueError(
                    f"error while handling argument \"{spelling}\": error: unknown value for --reasoning: '{value}'"
                )
        elif option == "--reasoning-effort":
            if value == "default":
                kwargs.pop("reasoning_effort", None)
            else:
                kwargs["reasoning_effort"] = json.dumps(value, ensure_ascii=False)
        else:  # --reasoning-preserve / --no-reasoning-preserve (a variable arrives as the spelling it means)
            kwargs["preserve_reasoning"] = "false" if spelling.startswith("--no-") else "true"
    return kwargs, enable_reasoning


def _grammar_default(given: list[tuple[str, str, str]]) -> str:
    """--grammar / --grammar-file / -j / -jf, each handled in order as common/arg.cpp does (the last wins).
    A schema is converted here, so a bad one fails startup; GBNF is parsed per request, as upstream."""
    grammar = ""
    for option, spelling, value in given:
        try:
            if option in ("--grammar-file", "--json-schema-file"):
                try:
                    value = Path(value).read_bytes().decode("utf-8", errors="replace")
                except OSError:
                    raise ValueError(f"error: failed to open file '{value}'\n") from None
            if option in ("--grammar", "--grammar-file"):
                grammar = value
                continue
            try:
                schema = json.loads(value)
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"[json.exception.parse_error.101] parse error at line {e.lineno}, column {e.colno}: "
                    f"syntax error while parsing value - {e.msg}"
                ) from None
            grammar = json_schema_to_grammar(schema)
        except ValueError as e:
            raise ValueError(f'error while handling argument "{spelling}": {e}') from None
    return grammar
