"""Start and stop a server (the reference or mlxcel) on a free loopback port; wait for it to have loaded."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx

from . import loopback

# Numerics pinned to F32 on both servers for content comparisons on the F32 twins: the tight configuration
# (see ARCHITECTURE.md, oracle rules). Without it both run b10621's defaults (f16 KV, flash attention auto),
# which the logit traces compare (oracle/trace.py).
F32_NUMERICS = ("-fa", "off", "-ctk", "f32", "-ctv", "f32")


class ServerStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fixture_paths(arg: str, side: str) -> str:
    """A case's fixture files in its flags, each side given the form it reads: "{lora}" is the seeded adapter
    (b10621 a GGUF LoRA, mlxcel a PEFT directory), "{lora_gguf}" the GGUF file on both (fixtures/lora.py)."""
    if "{models_dir}" in arg:  # both twins' GGUFs in one directory (fixtures/router.py), read by both
        from fixtures.router import models_dir

        arg = arg.replace("{models_dir}", str(models_dir()))
    if "{models_preset}" in arg:
        from fixtures.router import preset_file

        arg = arg.replace("{models_preset}", str(preset_file()))
    if "{draft_" in arg:  # a twin's GGUF as a draft model, read by both (mlxcel converts it once)
        from fixtures.twins import twin

        arg = arg.replace("{draft_q4_1}", str(twin("q4_1").gguf)).replace("{draft_f32}", str(twin("f32").gguf))
    if "{eagle3_head}" in arg:  # the EAGLE-3 head twin's GGUF (fixtures/eagle3_twin.py), read by both
        from fixtures.eagle3_twin import eagle3_twin

        arg = arg.replace("{eagle3_head}", str(eagle3_twin()))
    if "{dflash_draft}" in arg or "{dspark_draft}" in arg:  # the DFlash / DSpark draft twins (fixtures/dflash_twin.py)
        from fixtures.dflash_twin import dflash_twin, dspark_twin

        arg = arg.replace("{dflash_draft}", str(dflash_twin())).replace("{dspark_draft}", str(dspark_twin()))
    if "{control_vector}" in arg:  # the seeded control vector GGUF (fixtures/control_vector.py), read by both
        from fixtures.control_vector import control_vector_gguf

        arg = arg.replace("{control_vector}", str(control_vector_gguf()))
    if "{lora" not in arg:
        return arg
    from fixtures.lora import lora_gguf, lora_peft

    arg = arg.replace("{lora_gguf}", str(lora_gguf()))
    return arg.replace("{lora}", str(lora_gguf() if side == "reference" else lora_peft()))


@dataclass
class ServerProcess:
    name: str
    argv: list[str]
    port: int
    env: dict[str, str]
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mlxcel-oracle-")))
    proc: subprocess.Popen | None = None
    # an open pipe never written to, where /dev/null's end of file would be read in a loop (mlx.launch forwards
    # its stdin to the ranks and, at end of file, polls it without pause: a core of its own)
    stdin_pipe: bool = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self, timeout: float = 300.0) -> "ServerProcess":
        self.launch()
        return self.wait_healthy(timeout)

    def launch(self) -> "ServerProcess":
        """Start the process without waiting for it (start_together boots a pair side by side)."""
        # "{workdir}" in a case's flags: this process's own scratch directory (each server writes its own files)
        self.argv = [_fixture_paths(a.replace("{workdir}", str(self.workdir)), self.name) for a in self.argv]
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.workdir,
            stdin=subprocess.PIPE if self.stdin_pipe else subprocess.DEVNULL,
        )
        return self

    def wait_healthy(self, timeout: float = 300.0) -> "ServerProcess":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                # loaded once /health stops answering 503 (under --api-prefix the bare /health is a 404,
                # and a key check may answer 401 first: both only come after the loading gate)
                if loopback.get(self.base_url + "/health", timeout=2.0).status_code != 503:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise ServerStartError(f"{self.name} did not become healthy in {timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, lines: int = 20, limit: int = 3000) -> str:
        """The last lines it printed (a failed start shows why), on lines of their own."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n" + "\n".join(text.splitlines()[-lines:])[-limit:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "ServerProcess":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.cleanup()


def stop_in_background(procs: list[ServerProcess]) -> threading.Thread:
    """Signal every server now and reap them (their exit, then their scratch directories) on a thread: the next
    pair starts while these shut down (~0.25 s each). Join the thread before anything needs them gone."""
    for p in procs:
        if p.proc is not None and p.proc.poll() is None:
            p.proc.terminate()
    reaper = threading.Thread(target=lambda: [p.cleanup() for p in procs], name="oracle-reaper", daemon=True)
    reaper.start()
    return reaper


def start_together(*procs: ServerProcess, timeout: float = 300.0) -> None:
    """Launch every server (those not launched yet), then wait for each: a pair boots in the time of the slower
    one. If one fails, all are stopped before the error goes on."""
    try:
        for p in procs:
            if p.proc is None:
                p.launch()
        for p in procs:
            p.wait_healthy(timeout)
    except BaseException:
        for p in procs:
            p.stop()
        raise


# b10621 draws its media marker at random unless this pins it; both servers get the same one
MEDIA_MARKER = "<__media_mlxcel_oracle__>"


@contextmanager
def started(*procs: ServerProcess, timeout: float = 300.0) -> Iterator[tuple[str, ...]]:
    """The servers started together, their base URLs; each cleaned up afterwards, whatever happened."""
    try:
        start_together(*procs, timeout=timeout)
        yield tuple(p.base_url for p in procs)
    finally:
        for p in procs:
            p.cleanup()


def _clean_env(home: Path) -> dict[str, str]:
    """No LLAMA_ARG_* or other settings leak in from the caller's environment."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "MLXCEL_CACHE_DIR", "XDG_CACHE_HOME", "MLXCEL_BLAS")
    }
    keep["HOME"] = str(home)
    # the model store stays the caller's: under the fresh HOME a store name would be converted again (seconds)
    from fixtures.twins import cache_root

    keep["MLXCEL_CACHE_DIR"] = str(cache_root())
    keep["LLAMA_MEDIA_MARKER"] = MEDIA_MARKER
    return keep


def reference_server(binary: Path, gguf: Path | None, args: list[str] = (), port: int | None = None) -> ServerProcess:
    """gguf None: no -m, b10621's router mode."""
    port = port or free_port()
    sp = ServerProcess("reference", [], port, {})
    model = ["-m", str(gguf)] if gguf is not None else []
    sp.argv = [str(binary), *model, "--host", "127.0.0.1", "--port", str(port), *args]
    sp.env = _clean_env(sp.workdir)
    return sp


def mlxcel_server(model: str | None, args: list[str] = (), port: int | None = None) -> ServerProcess:
    """model None: no -m, router mode; its model store is then an empty directory of its own, as the
    reference's cache is under its fresh HOME."""
    port = port or free_port()
    sp = ServerProcess("mlxcel", [], port, {})
    chosen = ["-m", model] if model is not None else []
    sp.argv = [sys.executable, "-m", "server", *chosen, "--host", "127.0.0.1", "--port", str(port), *args]
    sp.env = _clean_env(sp.workdir)
    sp.env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    if model is None:
        sp.env["MLXCEL_MODELS_DIR"] = str(sp.workdir / "store")
    return sp


ROUTER = "router"  # a case's "twin" for router mode: both servers without -m


def server_pair(
    twin_kind: str,
    args: tuple[str, ...],
    binary: Path | None = None,
    with_reference: bool = True,
    pinned: bool = True,
    store: bool = False,
) -> tuple[ServerProcess | None, ServerProcess]:
    """(reference, mlxcel) for a case: on a twin with the common alias, or in router mode with the case's flags
    alone; the reference is None without with_reference (an offline run against recordings). On an F32 twin
    both get F32_NUMERICS after the case's flags unless pinned is False (b10621's defaults then). store: in router
    mode each side starts with a downloaded model in its own fresh store (fixtures/router.py, lay_out_store)."""
    from fixtures.twins import twin

    from .reference import build_reference

    if twin_kind == ROUTER:
        mine = mlxcel_server(None, list(args))
        ref = reference_server(binary or build_reference(), None, list(args)) if with_reference else None
        if store:
            from fixtures.router import lay_out_store

            for sp in (mine, ref) if ref is not None else (mine,):
                sp.env.update(lay_out_store(sp.name, sp.workdir))
        return ref, mine
    t = twin(twin_kind)
    both = [*COMMON_ARGS, *args, *(F32_NUMERICS if pinned and twin_kind.startswith("f32") else ())]
    mine = mlxcel_server(t.mlx_model, both)
    if not with_reference:
        return None, mine
    return reference_server(binary or build_reference(), t.gguf, both), mine


# Both servers get the same b10621 command line; the alias keeps the reported model name identical.
COMMON_ARGS = ("--alias", "smollm2-135m-instruct")


def shared_args() -> tuple[str, ...]:
    """The shared pairs' flags besides COMMON_ARGS, so that the runner can give every shared case the same
    starting state (docs/testing.md, "Server states"): slot actions on, to erase every slot before each case
    (b10621 refuses them without --slot-save-path), and no host-memory prompt cache, from which b10621 would
    restore an erased slot's prompt (--cache-ram's default 8192 MiB keeps it past an erase)."""
    slots = Path(tempfile.gettempdir()) / "mlxcel-oracle-shared-slots"
    slots.mkdir(exist_ok=True)
    return ("--cache-ram", "0", "--slot-save-path", str(slots))


def erase_slots(base_url: str) -> None:
    """Erase every slot of a server (POST /slots/{id}?action=erase): a shared case's starting state."""
    n = loopback.get(base_url + "/props", timeout=60).json()["total_slots"]
    for i in range(n):
        loopback.post(f"{base_url}/slots/{i}?action=erase", timeout=60).raise_for_status()


class Pair:
    """The reference on a GGUF twin and mlxcel on its MLX twin, same flags, free ports.

    On the F32 twins both also get F32_NUMERICS (flash attention off, F32 KV: the tight configuration) unless
    pinned is False.
    """

    def __init__(
        self,
        twin_kind: str,
        args: tuple[str, ...] = (),
        binary: Path | None = None,
        pinned: bool = True,
        store: bool = False,
    ):
        self.reference, self.mlxcel = server_pair(twin_kind, args, binary, pinned=pinned, store=store)

    def __enter__(self) -> "Pair":
        try:
            start_together(self.reference, self.mlxcel)
        except Exception:
            self.reference.cleanup()
            self.mlxcel.cleanup()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.mlxcel.cleanup()
        self.reference.cleanup()


class NoiseFloorPair(Pair):
    """Pair's shape with no reference: mlxcel twice on the same twin and flags, the second with its CPU kernels
    off (MLXCEL_CPU_KERNELS=0: every product through OpenBLAS, float32 sums in another order). Their logit
    traces measure how far two float32-close implementations part in a configuration (`mlxcel-oracle trace
    --noise-floor`): the floor under which no comparison with b10621 can go without its exact arithmetic."""

    def __init__(
        self,
        twin_kind: str,
        args: tuple[str, ...] = (),
        binary: Path | None = None,
        pinned: bool = True,
        store: bool = False,
    ):
        from fixtures.twins import twin

        both = [*COMMON_ARGS, *args, *(F32_NUMERICS if pinned and twin_kind.startswith("f32") else ())]
        self.mlxcel = mlxcel_server(twin(twin_kind).mlx_model, both)
        self.reference = mlxcel_server(twin(twin_kind).mlx_model, both)
        self.reference.env["MLXCEL_CPU_KERNELS"] = "0"
