"""The router's model pool: b10621's server_models, with each model served in this process (its own engine and
routes) where b10621 spawns a child server per model.

Status follows b10621's diagram: unloaded -> loading -> loaded (<-> sleeping), a load that fails back to
unloaded with its exit code. --models-max bounds the running set; an explicit load gives up the least recently
used idle model, a request for an unloaded model waits for one to go idle. Every change is broadcast to the
GET /models/sse clients in b10621's event vocabulary (model_status, status_change, models_reload, model_remove).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..options import OPTIONS
from .catalog import Entry
from .presets import Preset

log = logging.getLogger("mlxcel.router")


class RouterError(Exception):
    """A refusal in b10621's words: (message, error kind name of server.errors.ErrorKind)."""

    def __init__(self, message: str, kind: str = "INVALID_REQUEST"):
        super().__init__(message)
        self.kind = kind


def load_stages(argv: list[str]) -> list[str]:
    """b10621's load stages for a child started with argv (server_context's load_model): the text model, then
    the draft model where one is named (params.speculative.has_dft). mlxcel loads no projector."""
    draft = {s for o in OPTIONS if o.id in ("--spec-draft-model", "--spec-draft-hf") for s in o.spellings}
    named = any(a.split("=", 1)[0] in draft for a in argv)
    return ["text_model", "spec_model"] if named else ["text_model"]


@dataclass
class Loaded:
    """What a loaded model is: its routes (an ASGI app) and what it tells GET /models about itself."""

    app: Any
    info: dict
    stop: Callable[[], None]
    sleeping: Callable[[], bool] = lambda: False


@dataclass
class Instance:
    entry: Entry
    status: str = "unloaded"
    exit_code: int = 0
    last_used: float = 0.0
    req_count: int = 0
    args: list[str] = field(default_factory=list)
    loaded: Loaded | None = None
    generation: int = 0  # bumped by each load, so a late loader of an unloaded instance knows it is stale

    @property
    def name(self) -> str:
        return self.entry.name

    def current_status(self) -> str:
        if self.status == "loaded" and self.loaded is not None and self.loaded.sleeping():
            return "sleeping"
        return self.status

    def running(self) -> bool:
        return self.status in ("loaded", "loading")

    def failed(self) -> bool:
        return self.status == "unloaded" and self.exit_code != 0


class SseHub:
    """GET /models/sse clients: each an asyncio queue on its own loop, fed from any thread."""

    def __init__(self) -> None:
        self._clients: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue]] = []
        self._lock = threading.Lock()

    def subscribe(self) -> asyncio.Queue:
        q: asyncio.Queue = asyncio.Queue()
        with self._lock:
            self._clients.append((asyncio.get_running_loop(), q))
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        with self._lock:
            self._clients = [(lp, c) for lp, c in self._clients if c is not q]

    def broadcast(self, event: dict) -> None:
        with self._lock:
            clients = list(self._clients)
        for loop, q in clients:
            try:
                loop.call_soon_threadsafe(q.put_nowait, event)
            except RuntimeError:  # its loop has closed
                self.unsubscribe(q)


class ModelPool:
    def __init__(
        self,
        catalog: Callable[[], dict[str, Entry]],
        build: Callable[[Entry, list[str]], Loaded],
        render: Callable[[Entry], list[str]],
        models_max: int = 4,
        autoload: bool = True,
    ):
        self._catalog, self._build, self._render = catalog, build, render
        self.models_max = models_max
        self.autoload = autoload
        self.cv = threading.Condition()
        self.sse = SseHub()
        self.instances: dict[str, Instance] = {}
        self.stopping = False
        for name, entry in catalog().items():
            self.instances[name] = Instance(entry, args=render(entry))

    # --- lookups --------------------------------------------------------------------------------------------

    def resolve(self, name: str) -> Instance | None:
        """get_meta: a model by name or by one of its aliases."""
        with self.cv:
            inst = self.instances.get(name)
            if inst is not None:
                return inst
            return next((i for i in self.instances.values() if name in i.entry.aliases), None)

    def snapshot(self) -> list[Instance]:
        with self.cv:
            return list(self.instances.values())

    def _notify(self, event: str, model: str, data: dict | None = None) -> None:
        payload = {"model": model, "event": event}
        if data is not None:
            payload["data"] = data
        self.sse.broadcast(payload)

    # --- the running set --------------------------------------------------------------------------------------

    def _count_running(self) -> int:
        return sum(1 for i in self.instances.values() if i.running())

    def _has_capacity(self) -> bool:
        return self.models_max <= 0 or self._count_running() < self.models_max

    def _victim(self, exclude: str = "") -> Instance | None:
        """pick_victim: the least recently used model that is up and serves no request."""
        idle = [i for i in self.instances.values() if i.name != exclude and i.req_count == 0 and i.status == "loaded"]
        return min(idle, key=lambda i: i.last_used) if idle else None

    def load(self, name: str) -> None:
        """server_models::load: start loading (in the background) after giving up the LRU model if the set is
        full; the status says how it goes."""
        with self.cv:
            inst = self.instances.get(name)
            if inst is None:
                raise RouterError(f"model name={name} is not found", "SERVER")
            victim = None if self.models_max <= 0 or self._has_capacity() else self._victim()
        if victim is not None:
            log.info("models_max limit reached, removing LRU name=%s", victim.name)
            self.unload(victim.name)
        with self.cv:
            if inst.status != "unloaded":
                return
            if not self._has_capacity():
                raise RouterError("model limit reached, try again later", "SERVER")
            inst.status, inst.exit_code, inst.last_used = "loading", 0, time.monotonic()
            inst.generation += 1
            inst.args = self._render(inst.entry)
            generation = inst.generation
            self.cv.notify_all()
        self._notify("model_status", name, {"status": "loading"})
        threading.Thread(target=self._load, args=(inst, generation), name=f"mlxcel-load-{name}", daemon=True).start()

    def _progress(self, inst: Instance, stages: list[str], current: str, value: float) -> None:
        """A b10621 child's load progress: its stages, the one loading, how far (first and last samples)."""
        self._notify(
            "status_change",
            inst.name,
            {"status": "loading", "progress": {"stages": stages, "current": current, "value": value}},
        )

    def _load(self, inst: Instance, generation: int) -> None:
        stages = load_stages(inst.args[1:])
        self._progress(inst, stages, "text_model", 0.0)
        try:
            loaded = self._build(inst.entry, inst.args[1:])
        except Exception as exc:  # b10621's child exits with status 1 and the router marks it failed
            log.error("failed to load model name=%s: %s", inst.name, exc)
            self._set(inst, generation, "unloaded", exit_code=1)
            return
        with self.cv:
            stale = inst.generation != generation or inst.status != "loading" or self.stopping
            if not stale:
                inst.loaded = loaded
        if stale:
            loaded.stop()
            return
        self._progress(inst, stages, "text_model", 1.0)
        if "spec_model" in stages:  # loaded after the text model, as b10621's child loads its draft
            self._progress(inst, stages, "spec_model", 0.0)
            self._progress(inst, stages, "spec_model", 1.0)
        self._set(inst, generation, "loaded", info=loaded.info)

    def _set(self, inst: Instance, generation: int, status: str, exit_code: int = 0, info: dict | None = None) -> None:
        with self.cv:
            if inst.generation != generation:
                return
            inst.status, inst.exit_code = status, exit_code
            self.cv.notify_all()
        data: dict = {"status": status}
        if status == "unloaded":
            data["exit_code"] = exit_code
        if info is not None:
            data["info"] = info
        self._notify("status_change", inst.name, data)

    def unload(self, name: str) -> None:
        with self.cv:
            inst = self.instances.get(name)
            if inst is None or not inst.running():
                return
            loaded, inst.loaded = inst.loaded, None
            inst.generation += 1  # a load still in flight finds itself stale and stops what it built
            inst.status, inst.exit_code = "unloaded", 0
            self.cv.notify_all()
        if loaded is not None:
            loaded.stop()
        self._notify("status_change", name, {"status": "unloaded", "exit_code": 0})

    def unload_all(self) -> None:
        self.stopping = True
        for inst in self.snapshot():
            self.unload(inst.name)

    def ensure_ready(self, name: str, should_stop: Callable[[], bool] = lambda: False) -> None:
        """ensure_model_ready: load the model if it is not up (first giving up an idle one when the set is
        full, else waiting for one to go idle) and wait until it is; raises RouterError when the load fails."""
        inst = self.resolve(name)
        if inst is None:
            raise RouterError(f"model name={name} is not found", "SERVER")
        did_load = False
        while True:
            with self.cv:
                status = inst.status
                if status in ("loaded", "downloading", "downloaded"):
                    return  # (never waits on a download: the proxy then answers "not running")
                if status == "unloaded" and did_load:
                    if inst.failed():
                        raise RouterError(f"model name={name} failed to load", "SERVER")
                    return  # unloaded by another path: the proxy answers "not running"
                did_load = did_load or status == "loading"
                can_start = status == "unloaded" and (self._has_capacity() or self._victim(name) is not None)
                if not can_start:
                    self.cv.wait(0.2)
            if should_stop():
                raise RouterError(f"request cancelled while waiting for model name={name}", "SERVER")
            if can_start:
                try:
                    self.load(name)
                    did_load = True
                except RouterError:  # another request took the free place first: wait on
                    pass

    # --- requests ---------------------------------------------------------------------------------------------

    def enter(self, name: str, update_last_used: bool) -> Instance:
        """A request is handed to the model: proxy_request's bookkeeping."""
        with self.cv:
            inst = self.instances.get(name)
            if inst is None:
                raise RouterError(f"model name={name} is not found", "SERVER")
            if not inst.running() or inst.loaded is None:
                raise RouterError(f"model name={name} is not running")  # std::invalid_argument: a 400
            if update_last_used:
                inst.last_used = time.monotonic()
            inst.req_count += 1
            return inst

    def leave(self, inst: Instance) -> None:
        with self.cv:
            inst.req_count = max(0, inst.req_count - 1)
            self.cv.notify_all()

    # --- the store ---------------------------------------------------------------------------------------------

    def download(self, name: str, fetch: Callable[[str, Callable[[dict], None]], None]) -> None:
        """POST /models: the snapshot fetched in the background, listed meanwhile as "downloading" (b10621's
        download child), then "downloaded" until the next reload lists it as a store model."""
        with self.cv:
            if name in self.instances:
                raise RouterError(f"model '{name}' already exists")
            entry = Entry(name, "cache", Preset(name))
            entry.preset.set("LLAMA_ARG_MODEL", name)
            inst = self.instances[name] = Instance(entry, status="downloading", args=self._render(entry))
            self.instances = dict(sorted(self.instances.items()))

        def run() -> None:
            def progress(p: dict) -> None:
                self._notify("download_progress", name, p)

            try:
                fetch(name, progress)
            except Exception as exc:
                log.error("download of %s failed: %s", name, exc)
                with self.cv:
                    if self.instances.get(name) is inst:
                        del self.instances[name]
                    self.cv.notify_all()
                self._notify("download_failed", name, {})
                return
            with self.cv:
                inst.status = "downloaded"
                self.cv.notify_all()
            self._notify("download_finished", name, {})
            self.reload()

        threading.Thread(target=run, name=f"mlxcel-download-{name}", daemon=True).start()

    def remove(self, name: str, delete: Callable[[str], None]) -> None:
        """DELETE /models: a store model unloaded, its snapshot deleted, its entry gone (b10621's remove)."""
        with self.cv:
            inst = self.instances.get(name)
            if inst is None:
                raise RouterError(f"model name={name} is not found", "SERVER")
            if inst.entry.source != "cache":
                raise RouterError(f"model name={name} is not removable (not from cache)", "SERVER")
        self.unload(name)
        delete(name)
        with self.cv:
            self.instances.pop(name, None)
            self.cv.notify_all()
        self._notify("model_remove", name, {})

    # --- reload -------------------------------------------------------------------------------------------------

    def reload(self) -> None:
        """GET /models?reload=1: read the sources again; models gone or changed are unloaded, new ones added."""
        fresh = self._catalog()
        with self.cv:
            current = dict(self.instances)
        for name, inst in current.items():
            entry = fresh.get(name)
            if inst.status in ("downloading", "downloaded"):
                continue
            if entry is None or entry.preset.options != inst.entry.preset.options:
                if inst.running():
                    self.unload(name)
        with self.cv:
            for name in list(self.instances):
                if name not in fresh and self.instances[name].status != "downloading":
                    del self.instances[name]
            for name, entry in fresh.items():
                inst = self.instances.get(name)
                if inst is None or inst.status == "downloaded":  # a finished download becomes a store model
                    self.instances[name] = Instance(entry, args=self._render(entry))
                else:
                    inst.entry = entry
                    if not inst.running():
                        inst.args = self._render(entry)
            self.instances = dict(sorted(self.instances.items()))
        self._notify("models_reload", "*")
