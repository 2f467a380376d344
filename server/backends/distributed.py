"""One model served over several ranks with MLX's own distributed layer (docs/scaling-out.md).

`mlx.launch --backend ring --hosts H1,H2 ... mlxcel-server -m MODEL ...` starts the same command on every rank.
Rank 0 runs the HTTP layer, the engine and sampling as a one-process server does; its backend is a `Leader`,
which sends every call that runs a forward pass or changes a cache to the other ranks before making it itself.
Each other rank runs `follow`: the same call on its own shard of the model, in the same order, so the forward
passes' collectives (mlx-lm's sharded layers: attention heads and MLP columns split, `all_sum` after o and down)
meet. Only rank 0 reads the logits. The calls travel as JSON over the group's own `send` / `recv` (a length, then
the bytes): token ids, positions and handles, never arrays. Caches, batches and snapshots cross the engine's
boundary as `Handle`s, each rank holding its own arrays under the same number; a handle the engine drops is
dropped on every rank with the next call.

Every rank starts from the same command line; before serving, rank 0 compares each rank's `fingerprint` (the
checkpoint's config and weight files, the flags that change a pass) with its own, and all stop on a mismatch.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import hashlib
import json
import logging
import os
import signal
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from .base import Backend, BackendLost, BackendRefusal

log = logging.getLogger("mlxcel.distributed")

# the calls a follower repeats (the others read rank 0's own state: length, greedy, to_numpy, state_bytes, ...)
MIRRORED = frozenset(
    {
        "prefill",
        "decode",
        "decode_rows",
        "verify",
        "score",
        "new_cache",
        "snapshot",
        "restore",
        "restore_chunks",
        "trim",
        "shift",
        "batch_merge",
        "batch_keep",
        "batch_extend",
        "batch_extract",
    }
)
# the calls whose result is a cache, a batch or a snapshot (held under a handle on every rank)
HANDED_OUT = frozenset({"new_cache", "snapshot", "restore", "restore_chunks", "batch_merge", "batch_extract"})
STOP, HELLO, PROBE = "stop", "hello", "probe"


@dataclass(frozen=True)
class Ranks:
    """The group mlx.launch started this process in, and how the model is split over it."""

    group: Any  # mx.distributed.Group
    split: str = "tensor"  # "tensor": heads and MLP columns (mlx-lm's shard); "pipeline": layers (its pipeline)

    @property
    def rank(self) -> int:
        return int(self.group.rank())

    @property
    def size(self) -> int:
        return int(self.group.size())


def world() -> Ranks | None:
    """The ranks of a launch by mlx.launch (MLX_RANK and a host file in the environment), or None: one process."""
    if "MLX_RANK" not in os.environ or not os.environ.get("MLX_HOSTFILE"):
        return None
    _stop_with_launcher()
    group = mx.distributed.init(strict=True, backend="ring")
    return Ranks(group) if group.size() > 1 else None


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _stop_with_launcher() -> None:
    """SIGTERM to this rank when the process that started it (mlx.launch) goes: a rank blocked in a receive
    would otherwise outlive its launch (Linux; elsewhere the launcher's own stop is all there is)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # (the launcher went before the call above)
        os.kill(os.getpid(), signal.SIGTERM)


def _send(payload: bytes, dst: int, group: Any) -> None:
    """A length, then the bytes: each send evaluated on its own (sends evaluated together go out in any order)."""
    for x in (mx.array([len(payload)], mx.int32), mx.array(np.frombuffer(payload or b" ", np.uint8))):
        mx.eval(mx.distributed.send(x, dst, group=group))


class Channel:
    """Rank 0's calls to every other rank, and their answers to it, over the group's send / recv."""

    def __init__(self, ranks: Ranks):
        self.ranks = ranks

    def broadcast(self, payload: bytes) -> None:
        """From rank 0 to every other rank."""
        g = self.ranks.group
        for dst in range(1, self.ranks.size):
            _send(payload, dst, g)

    def receive(self, src: int = 0) -> bytes:
        """One message from src (rank 0 unless rank 0 gathers)."""
        g = self.ranks.group
        head = mx.distributed.recv((1,), mx.int32, src, group=g)
        mx.eval(head)
        n = int(np.array(head)[0])
        body = mx.distributed.recv((max(n, 1),), mx.uint8, src, group=g)
        mx.eval(body)
        return bytes(np.array(body))[:n]

    def answer(self, payload: bytes) -> None:
        """From another rank to rank 0."""
        g = self.ranks.group
        _send(payload, 0, g)

    def gather(self) -> list[bytes]:
        """Every other rank's answer, in rank order (rank 0)."""
        return [self.receive(src) for src in range(1, self.ranks.size)]


def fingerprint(checkpoint: Path, flags: dict) -> str:
    """What every rank must share to compute the same pass: the checkpoint's configuration and weight files (names
    and sizes) and the flags that change a pass."""
    h = hashlib.sha256()
    h.update((checkpoint / "config.json").read_bytes())
    for f in sorted(checkpoint.glob("*.safetensors")):
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    h.update(json.dumps(flags, sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def split_refusal(tp: int | None, pp: int | None, size: int) -> str | None:
    """--tp-size / --pp-size against the ranks launched (size 1: one process): the reason they do not fit, or
    None. One split at a time: tensor and pipeline parallel together are not served."""
    given = [(f, n) for f, n in (("--tp-size", tp), ("--pp-size", pp)) if n is not None]
    for flag, n in given:
        if n < 1:
            return f"{flag} {n}: a split is over 1 or more ranks"
        if size == 1 and n > 1:
            return f"{flag} {n}: a model is split over the ranks mlx.launch starts (docs/scaling-out.md); this is one"
    if (tp or 1) > 1 and (pp or 1) > 1:
        return "--tp-size and --pp-size both above 1: one split at a time (tensor or pipeline parallel)"
    if size > 1 and given and max(n for _, n in given) != size:
        flag, n = max(given, key=lambda g: g[1])
        return f"{flag} {n}: {size} ranks were launched: the split is over all of them"
    return None


def split_of(pp: int | None) -> str:
    """The split a launch serves (split_refusal passed): pipeline where --pp-size asks for it, else tensor."""
    return "pipeline" if (pp or 1) > 1 else "tensor"


def split(model: Any, ranks: Ranks) -> None:
    """The model split over the ranks as ranks.split says."""
    (pipeline if ranks.split == "pipeline" else shard)(model, ranks)


def pipeline(model: Any, ranks: Ranks) -> None:
    """Consecutive layers per rank, rank 0 the last ones (mlx-lm's PipelineMixin.pipeline: each rank receives the
    hidden rows from the rank before it, runs its layers, sends them on; the last layers' output is gathered on
    every rank). A model without it, or with fewer layers than ranks, is refused in one line."""
    inner: Any = getattr(model, "model", None)
    if not hasattr(inner, "pipeline"):
        raise BackendRefusal(f"{type(model).__module__}: mlx-lm has no pipeline split for this architecture")
    n_layers = len(inner.layers)
    if n_layers < ranks.size:
        raise BackendRefusal(f"{n_layers} layers over {ranks.size} ranks: a pipeline stage needs one at least")
    inner.pipeline(ranks.group)


def probe_seconds(model: Any, reps: int = 8) -> float:
    """Seconds this rank takes for a fixed product every rank shares in full (4 rows against the token embedding
    as the output head uses it: the same shape on every rank whatever the split), `reps` times: the ranks' figures
    side by side show a slow one (a slower or busier machine holds every rank's collectives)."""
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    product: Any
    if embed is not None and hasattr(embed, "as_linear"):
        x = mx.ones((4, embed.weight.shape[-1] * (32 // embed.bits if hasattr(embed, "bits") else 1)))
        product = embed.as_linear
    else:  # (an architecture laid out otherwise: a fixed product, the machine's own speed)
        x, w = mx.ones((4, 2048)), mx.ones((2048, 8192))
        product = lambda rows: rows @ w  # noqa: E731
    mx.eval(product(x))  # (the first product pays for faulting the pages in)
    start = time.perf_counter()
    for _ in range(reps):
        mx.eval(product(x))
    return time.perf_counter() - start


def shard(model: Any, ranks: Ranks) -> None:
    """The model's attention heads and MLP columns split over the ranks (mlx-lm's Model.shard); a model without it,
    or whose heads the ranks do not divide, is refused in one line."""
    if not hasattr(model, "shard"):
        raise BackendRefusal(f"{type(model).__module__}: mlx-lm has no tensor-parallel split for this architecture")
    args = getattr(model, "args", None)
    for name in ("num_attention_heads", "num_key_value_heads"):
        heads = getattr(args, name, None)
        if heads is not None and heads % ranks.size:
            raise BackendRefusal(f"{name} {heads} is not a multiple of the {ranks.size} ranks (tensor parallel)")
    model.shard(ranks.group)


class Handle:
    """A cache, batch or snapshot of rank 0's, known to every rank by its number."""

    __slots__ = ("number", "local", "__weakref__")

    def __init__(self, number: int, local: Any):
        self.number, self.local = number, local


def _settle(*objs: Any) -> None:
    """Evaluate a call's results and the caches it touched, so its collectives have run before the next call's
    message goes out on the same connections."""
    arrays: list[mx.array] = []

    def walk(x: Any) -> None:
        if isinstance(x, mx.array):
            arrays.append(x)
        elif isinstance(x, (list, tuple)):
            for y in x:
                walk(y)
        elif hasattr(x, "state") and not isinstance(x, type):
            try:
                walk(x.state)
            except (AttributeError, TypeError, ValueError):  # (an empty cache has no state yet)
                pass

    for obj in objs:
        walk(obj)
    if arrays:
        mx.eval(arrays)


def _encode(x: Any) -> Any:
    if isinstance(x, Handle):
        return {"h": x.number}
    if isinstance(x, (list, tuple)):
        return [_encode(y) for y in x]
    if isinstance(x, frozenset):
        return sorted(x)
    return x


def _decode(x: Any, handles: dict[int, Any]) -> Any:
    if isinstance(x, dict) and set(x) == {"h"}:
        return handles[x["h"]]
    if isinstance(x, list):
        return [_decode(y, handles) for y in x]
    return x


def _local(x: Any) -> Any:
    if isinstance(x, Handle):
        return x.local
    if isinstance(x, list):
        return [_local(y) for y in x]
    return x


class Leader:
    """Rank 0's backend: the local backend's calls, each sent to the other ranks first (module docstring)."""

    def __init__(self, backend: Backend, channel: Channel):
        self._backend, self._channel = backend, channel
        self.capabilities = dataclasses.replace(backend.capabilities, adapters=False, control_vectors=False)
        self.n_vocab, self.n_ctx_train = backend.n_vocab, backend.n_ctx_train
        self._numbers = 0
        self._dropped: collections.deque[int] = collections.deque()  # handles the engine let go since the last call
        self._lock = threading.Lock()
        self._stopped = False
        self.lost = ""  # why the ranks can no longer compute ("": they can)

    def _handle(self, local: Any) -> Handle:
        handle = Handle(self._numbers, local)
        self._numbers += 1
        weakref.finalize(handle, self._dropped.append, handle.number)  # (a deque's append and popleft: atomic)
        return handle

    def _call(self, op: str, *args: Any) -> Any:
        with self._lock:
            if self._stopped or self.lost:
                raise BackendLost(self.lost or "the other ranks have stopped")
            dropped = [self._dropped.popleft() for _ in range(len(self._dropped))]
            number = self._numbers if op in HANDED_OUT else None
            message = {"op": op, "args": _encode(list(args)), "drop": dropped, "new": number}
            try:
                self._channel.broadcast(json.dumps(message).encode())
                result = getattr(self._backend, op)(*(_local(a) for a in args))
                _settle(result, *(_local(a) for a in args))
            except RuntimeError as exc:  # (MLX's ring: a peer's connection lost in a send or an all_sum)
                self.lost = f"a rank of the model split across ranks was lost ({exc})"
                log.error("%s: rank 0 stops", self.lost)
                raise BackendLost(self.lost) from None
            if op == "snapshot":
                return self._handle(result[0]), result[1]
            return self._handle(result) if op in HANDED_OUT else result

    def rank_seconds(self) -> list[float]:
        """Every rank's probe_seconds, rank 0 first (GET /metrics): in turn with the passes, under the same lock."""
        with self._lock:
            if self._stopped or self.lost:
                return []
            try:
                self._channel.broadcast(json.dumps({"op": PROBE}).encode())
                mine = probe_seconds(self._backend.model)  # type: ignore[attr-defined]
                return [mine, *(float(json.loads(a)["seconds"]) for a in self._channel.gather())]
            except RuntimeError as exc:
                self.lost = f"a rank of the model split across ranks was lost ({exc})"
                log.error("%s: rank 0 stops", self.lost)
                return []

    def stop(self) -> None:
        """Tell every other rank to stop (once; a rank already gone is not waited for)."""
        with self._lock:
            if not self._stopped and not self.lost:
                self._stopped = True
                try:
                    self._channel.broadcast(json.dumps({"op": STOP}).encode())
                except RuntimeError as exc:
                    log.warning("the other ranks could not be told to stop: %s", exc)

    # --- mirrored ---
    def prefill(self, cache: Handle, tokens: list[int]) -> Any:
        return self._call("prefill", cache, list(tokens))

    def decode(self, cache: Handle, token: int) -> Any:
        return self._call("decode", cache, int(token))

    def decode_rows(self, batch: Handle, tokens: list[int]) -> Any:
        return self._call("decode_rows", batch, [int(t) for t in tokens])

    def verify(self, cache: Handle, tokens: list[int]) -> Any:
        return self._call("verify", cache, list(tokens))

    def score(self, prompt: list[int], continuation: list[int], n_probs: int) -> list[tuple]:
        return self._call("score", list(prompt), list(continuation), int(n_probs))

    def new_cache(self) -> Handle:
        return self._call("new_cache")

    def snapshot(self, cache: Handle, n: int, n_stream: int = 1) -> tuple[Handle, int]:
        return self._call("snapshot", cache, int(n), int(n_stream))

    def restore(self, snap: Handle, n: int) -> Handle:
        return self._call("restore", snap, int(n))

    def restore_chunks(self, snap: Handle, prefix: int, chunks: list[tuple[int, int, int]]) -> Handle:
        return self._call("restore_chunks", snap, int(prefix), [list(c) for c in chunks])

    def trim(self, cache: Handle, n: int) -> None:
        self._call("trim", cache, int(n))

    def shift(self, cache: Handle, n_keep: int, n_discard: int) -> None:
        self._call("shift", cache, int(n_keep), int(n_discard))

    def batch_merge(self, caches: list[Handle]) -> Handle:
        return self._call("batch_merge", list(caches))

    def batch_keep(self, batch: Handle, rows: list[int]) -> None:
        self._call("batch_keep", batch, [int(r) for r in rows])

    def batch_extend(self, batch: Handle, other: Handle) -> None:
        self._call("batch_extend", batch, other)

    def batch_extract(self, batch: Handle, row: int) -> Handle:
        return self._call("batch_extract", batch, int(row))

    # --- rank 0's own ---
    def length(self, cache: Handle) -> int:
        return self._backend.length(cache.local)

    def can_batch(self, caches: list[Handle]) -> bool:
        return self._backend.can_batch([c.local for c in caches])

    def state_bytes(self, n: int, n_stream: int = 1) -> int:
        return self._backend.state_bytes(n, n_stream)

    def kv_report(self, cells: int, n_stream: int, n_seq: int) -> str:
        return self._backend.kv_report(cells, n_stream, n_seq)

    def weights(self) -> list:
        return self._backend.weights()

    def greedy(self, logits: Any, banned: frozenset[int] | tuple[int, ...] = ()) -> int:
        return self._backend.greedy(logits, banned)

    def to_numpy(self, logits: Any) -> Any:
        return self._backend.to_numpy(logits)

    def attach_adapters(self, lora: Any) -> None:
        raise BackendRefusal("LoRA adapters (--lora) are not served across ranks")

    def attach_control_vectors(self, specs: tuple[tuple[str, float], ...], layers: tuple[int, int]) -> None:
        raise BackendRefusal("control vectors are not served across ranks")


def handshake_leader(channel: Channel, mine: str) -> None:
    """Rank 0: every rank's fingerprint against its own; a mismatch stops every rank (BackendRefusal here)."""
    channel.broadcast(json.dumps({"op": HELLO, "fingerprint": mine}).encode())
    answers = [json.loads(a) for a in channel.gather()]
    differ = [i + 1 for i, a in enumerate(answers) if a.get("fingerprint") != mine]
    if differ:
        channel.broadcast(json.dumps({"op": STOP}).encode())
        raise BackendRefusal(
            f"rank(s) {', '.join(map(str, differ))} started on another model or other flags than rank 0: "
            "every rank must run the same command line"
        )
    channel.broadcast(json.dumps({"op": "serve"}).encode())


def follow(backend: Backend, channel: Channel, mine: str) -> int:
    """A rank other than 0: answer rank 0's handshake, then repeat its calls until it says stop. The exit status:
    0 on rank 0's stop, 1 when the ranks' fingerprints differ or rank 0 went without its stop."""
    try:
        hello = json.loads(channel.receive())
        channel.answer(json.dumps({"fingerprint": mine}).encode())
        if json.loads(channel.receive()).get("op") != "serve":
            log.error(
                "rank %d: rank 0 runs %s, this rank %s: not serving", channel.ranks.rank, hello["fingerprint"], mine
            )
            return 1
        return _repeat(backend, channel)
    except RuntimeError as exc:  # (MLX's ring: rank 0's connection lost; it failed to load, or went)
        log.error("rank %d: rank 0 is gone (%s): stopping", channel.ranks.rank, exc)
        return 1


def _repeat(backend: Backend, channel: Channel) -> int:
    """Rank 0's calls, each made on this rank's shard, until its stop (0)."""
    handles: dict[int, Any] = {}
    while True:
        message = json.loads(channel.receive())
        op = message["op"]
        if op == STOP:
            return 0
        if op == PROBE:
            channel.answer(json.dumps({"seconds": probe_seconds(backend.model)}).encode())  # type: ignore[attr-defined]
            continue
        for number in message.get("drop", ()):
            handles.pop(number, None)
        if op not in MIRRORED:
            raise RuntimeError(f"rank 0 sent an unknown call '{op}'")
        args = _decode(message["args"], handles)
        result = getattr(backend, op)(*args)
        _settle(result, *args)
        if message.get("new") is not None:
            handles[message["new"]] = result[0] if op == "snapshot" else result
