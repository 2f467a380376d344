"""What every route may read: the tokenizer, the engine handle, the server's settings and model identity."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from ..engine.engine import Engine
from ..grammar.constraint import GrammarVocab
from ..models.tokenizer import ModelTokenizer
from .auth import AuthConfig
from .cors import CorsConfig
from .task_params import TaskParams
from .vertex_settings import VertexSettings
from .webui_settings import WebUI


@dataclass(frozen=True)
class ServerSettings:
    """The command line's answers the routes need (b10621's common_params)."""

    endpoint_slots: bool = True  # --slots / --no-slots
    endpoint_props: bool = False  # --props
    endpoint_metrics: bool = False  # --metrics
    base_params: TaskParams = field(default_factory=TaskParams)  # a request's defaults
    n_batch: int = 2048  # --batch-size (the infill prompt budget)
    spm_infill: bool = False  # --spm-infill: the infill prompt's suffix before its prefix
    special: bool = False  # --special: special tokens rendered as text
    slots_debug: bool = False  # LLAMA_SERVER_SLOTS_DEBUG: /slots shows prompts and generated text
    chat: object = None  # server.chat.params.ChatSettings; None: the checkpoint's template, defaults
    encoder: object = None  # server.encoder.worker.EncoderConfig under --embeddings / --reranking, else None
    # the HTTP layer (server/api/cors.py, auth.py, prefix.py): b10621's defaults, CORS on with origin echo,
    # no API key, no prefix; cors=None leaves CORS out entirely
    cors: CorsConfig | None = field(default_factory=CorsConfig)  # --cors-origins/-headers/-methods/-credentials
    auth: AuthConfig = field(default_factory=AuthConfig)  # --api-key, --api-key-file, LLAMA_/MLXCEL_API_KEY
    api_prefix: str = ""  # --api-prefix
    slot_save_path: str = ""  # --slot-save-path: POST /slots/:id_slot saves and restores there
    prompts_log_dir: str = ""  # --log-prompts-dir: each completion's prompt written there (api/prompt_log.py)
    vertex: VertexSettings | None = None  # AIP_MODE=PREDICTION
    webui: WebUI = field(default_factory=lambda: WebUI(dist=None))  # --ui, the built assets, --ui-config
    static_path: str = ""  # --path: its files served in place of the built UI (api/static_path.py)
    mcp_proxy: bool = False  # --ui-mcp-proxy: GET and POST /cors-proxy forward (api/cors_proxy.py)
    tools: tuple = ()  # --tools, MCP servers: the tools GET and POST /tools serve (server/tools/builtin.py's Tool)
    tools_on: bool = False  # /tools served (b10621: tools asked for or MCP servers configured), else its 403
    tools_runtime: object = None  # --tools-runtime: server/tools/host.py's StaticRuntime or ContainerRuntime
    projector: object = None  # --mmproj: server.models.clip_llava.LlavaEncoder (its n_tokens), else None
    media_path: str = ""  # --media-path: where file:// media resolve


@dataclass
class AppState:
    engine: Engine
    tokenizer: ModelTokenizer
    model_name: str  # what responses report as "model" (alias, else the checkpoint's name)
    settings: ServerSettings = field(default_factory=ServerSettings)
    model_path: str = ""
    model_ftype: str = ""
    slot_identity: object = None  # server.engine.slot_files.Identity: what slot files are bound to
    model_aliases: tuple[str, ...] = ()  # --alias, sorted (GET /v1/models)
    model_tags: tuple[str, ...] = ()  # --tags, sorted (GET /v1/models)
    model_facts: object = None  # server.models.facts.ModelFacts: GET /v1/models's meta block
    _grammar_vocab: object = None
    _grammar_lock: threading.Lock = field(default_factory=threading.Lock)

    def grammar_vocab(self):
        """The vocabulary grammars compile against, built on first use and shared with the engine."""
        with self._grammar_lock:
            if self._grammar_vocab is None:
                self._grammar_vocab = GrammarVocab(self.tokenizer, frozenset(self.engine.eog_ids))
                self.engine.use_grammar_vocab(self._grammar_vocab)
            return self._grammar_vocab
