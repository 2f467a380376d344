"""The models a router can serve, reconciled from b10621's three sources (server_models::load_models): the model
store (b10621's cache), --models-dir, and --models-preset; then the router's own command line over each."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..models.hub import list_snapshots
from ..models.store import cached_models
from ..textparse import TRUTHY
from .presets import (
    DEDUP_CACHE_MODELS,
    DEFAULT_NAME,
    STOP_TIMEOUT,
    Preset,
    PresetError,
    cascade,
    from_argv,
    load_ini,
    unset_reserved,
)

DEFAULT_STOP_TIMEOUT = 10  # seconds (server-models.h)


@dataclass
class Entry:
    name: str
    source: str  # "cache" | "models_dir" | "preset"
    preset: Preset
    aliases: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    hidden: bool = False
    stop_timeout: int = DEFAULT_STOP_TIMEOUT


def _is_companion(name: str) -> bool:
    """A projector or a draft model beside a model: never a model of its own."""
    return "mmproj" in name or name.startswith(("mtp-", "dspark-", "dflash-"))


def scan_models_dir(models_dir: str) -> dict[str, Preset]:
    """load_from_models_dir: each *.gguf file is a model named by the file (".gguf" removed), each subdirectory
    one named by the directory: an MLX checkpoint (config.json), else the GGUF it holds (the first shard of a
    split one)."""
    root = Path(models_dir)
    if not root.is_dir():
        raise PresetError(f"error: '{models_dir}' does not exist or is not a directory\n")
    out: dict[str, Preset] = {}
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        path = Path(entry.path)
        if entry.is_dir():
            model = _model_in(path)
            if model is not None:
                out[entry.name] = _local(entry.name, model)
        elif entry.name.endswith(".gguf") and not _is_companion(entry.name):
            name = entry.name.replace(".gguf", "")
            out[name] = _local(name, str(path))
    return out


def _model_in(directory: Path) -> str | None:
    if (directory / "config.json").is_file():
        return str(directory)
    model = first_shard = None
    for f in sorted(directory.iterdir(), key=lambda p: p.name):
        if f.is_file() and f.name.endswith(".gguf") and not _is_companion(f.name):
            if "-00001-of-" in f.name:
                first_shard = str(f)
            else:
                model = str(f)
    return first_shard or model


def _local(name: str, path: str) -> Preset:
    preset = Preset(name)
    preset.set("LLAMA_ARG_MODEL", path)
    return preset


def scan_store(root: Path) -> dict[str, Preset]:
    """The model store's checkpoints, each a model named as -m accepts it (b10621's cache, whose entries it
    names by repository)."""
    out = {}
    for name in cached_models(root):
        if "/" not in name:  # the bundled models, by their store names (anything else there is no store model)
            out[name] = _local(name, name)
    for name in list_snapshots(root):
        out[name] = _local(name, name)
    return dict(sorted(out.items()))


def _split(value: str | None) -> list[str]:
    """A preset's alias / tags value: comma-split, stripped, empties dropped, as a sorted set."""
    if not value:
        return []
    return sorted({s.strip(" \t\n\v\f\r") for s in value.split(",")} - {""})


def load_catalog(store_root: Path | None, models_dir: str, preset_file: str, router: Preset) -> dict[str, Entry]:
    """Every model the router offers, by name (sorted, as b10621's map holds them)."""
    cached = scan_store(store_root) if store_root is not None else {}
    local = scan_models_dir(models_dir) if models_dir else {}
    custom, global_preset = load_ini(preset_file) if preset_file else ({}, Preset("*"))
    cached, local, custom = (cascade(global_preset, p) for p in (cached, local, custom))
    final: dict[str, Preset] = {}
    source: dict[str, str] = {}
    for name, preset in cached.items():
        final[name], source[name] = preset, "cache"
    for name, preset in local.items():
        final[name], source[name] = preset, "models_dir"
    for name, preset in custom.items():
        if name in final:
            final[name].merge(preset)
        else:
            final[name] = preset
        source[name] = "preset"
    for preset in final.values():  # the router's own command line wins over every preset
        preset.merge(router)
    hidden = _deduplicated(custom, cached, source)
    entries: dict[str, Entry] = {}
    for name in sorted(final):
        preset = final[name]
        entry = Entry(
            name,
            source.get(name, "preset"),
            preset,
            _split(preset.get("LLAMA_ARG_ALIAS")),
            _split(preset.get("LLAMA_ARG_TAGS")),
            name in hidden,
        )
        timeout = preset.options.get(STOP_TIMEOUT)
        if timeout is not None:
            try:
                entry.stop_timeout = int(timeout)
            except ValueError:
                entry.stop_timeout = DEFAULT_STOP_TIMEOUT
        _add(entries, entry)
    return entries


def _deduplicated(custom: dict[str, Preset], cached: dict[str, Preset], source: dict[str, str]) -> set[str]:
    """Store models a preset with dedup-cache-models names again (by the same checkpoint)."""
    named = {
        p.get("LLAMA_ARG_MODEL")
        for p in custom.values()
        if p.options.get(DEDUP_CACHE_MODELS, "") in TRUTHY and p.get("LLAMA_ARG_MODEL")
    }
    return {n for n, p in cached.items() if source.get(n) == "cache" and p.get("LLAMA_ARG_MODEL") in named}


def _add(entries: dict[str, Entry], entry: Entry) -> None:
    """server_models::add_model's checks: unique names, and aliases that collide with nothing."""
    name = entry.name
    for key, other in entries.items():
        if name in other.aliases:
            raise PresetError(f"model name '{name}' conflicts with alias of model '{key}'")
    for alias in entry.aliases:
        if alias in entries:
            raise PresetError(f"alias '{alias}' for model '{name}' conflicts with existing model name")
        for key, other in entries.items():
            if alias in other.aliases:
                raise PresetError(f"alias '{alias}' for model '{name}' conflicts with alias of model '{key}'")
    entries[name] = entry


def router_preset(argv: list[str]) -> Preset:
    """The router's command line as the preset every model inherits (what it may not pass on removed)."""
    preset = from_argv(argv)
    unset_reserved(preset, model_args=True)
    return preset


def displayed_preset(entry: Entry) -> str | None:
    """GET /models's status.preset: the model's preset as INI, without what the router sets per instance."""
    if not entry.preset.name or entry.preset.name == DEFAULT_NAME and not entry.preset.options:
        return None
    shown = entry.preset.copy()
    unset_reserved(shown, model_args=False)
    for env in ("LLAMA_ARG_HOST", "LLAMA_ARG_PORT", "LLAMA_ARG_ALIAS", "LLAMA_ARG_TAGS"):
        shown.unset(env)
    return shown.to_ini()
