"""The model store's downloads: `<owner>/<name>` snapshots of a Hugging Face-style hub, fetched file by file.

The store is --model-store-root, else $MLXCEL_MODELS_DIR, else the cache's models/ directory. A snapshot is
written as `<store>/<owner>/<name>/`: each file downloads into `<file>.part`, resumes from where a broken
download stopped (an HTTP range), and is checked against the SHA-256 the hub lists for it before it is renamed
into place; the snapshot counts as a model only once its config.json is there. --offline (or
$MLXCEL_OFFLINE / $HF_HUB_OFFLINE) refuses every download. The hub is $MLXCEL_HUB_ENDPOINT, else $HF_ENDPOINT,
else https://huggingface.co; tests run a fake hub on loopback. --hf-token (else $HF_TOKEN) authenticates every
request as b10621's downloader does: `Authorization: Bearer <token>`, on the hub's model API only for a token
shaped as Hugging Face issues them (common/hf-cache.cpp's is_valid_hf_token), on file downloads for any.
A hub that cannot be reached is one line (HubError), never the HTTP client's traceback.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import sys
import urllib.parse
from pathlib import Path
from typing import Callable

from ..cachedir import STAMP, cache_root

STORE_ENV = "MLXCEL_MODELS_DIR"
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_OFFLINE = {"value": False}
_TOKEN: dict[str, str | None] = {"value": None}
log = logging.getLogger("mlxcel.models")


class HubError(RuntimeError):
    pass


def set_offline(offline: bool) -> None:
    """--offline, for the whole process."""
    _OFFLINE["value"] = offline


def offline() -> bool:
    return _OFFLINE["value"] or any(
        os.environ.get(v, "") not in ("", "0", "false") for v in ("MLXCEL_OFFLINE", "HF_HUB_OFFLINE")
    )


_STORE_ROOT: dict[str, Path | None] = {"value": None}


def set_store_root(path: str | None) -> None:
    """--model-store-root."""
    _STORE_ROOT["value"] = Path(path).expanduser() if path else None


def store_root() -> Path:
    if _STORE_ROOT["value"] is not None:
        return _STORE_ROOT["value"]
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV]).expanduser()
    return cache_root() / "models"


def endpoint() -> str:
    return (os.environ.get("MLXCEL_HUB_ENDPOINT") or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip(
        "/"
    )


# b10621's words for a name that is not <user>/<model>[:quant] (common/download.cpp)
BAD_REPO = "error: invalid HF repo format, expected <user>/<model>[:quant]\n"


def check_repo(repo: str) -> str:
    """An `<owner>/<name>` the store can hold: b10621's format check, then what mlxcel's store needs (no quant
    tag: an MLX snapshot has none; no name that would leave the store)."""
    head, _, tag = repo.partition(":")
    parts = head.split("/")
    if len(parts) != 2 or not all(parts):
        raise HubError(BAD_REPO)
    if tag:
        raise HubError(
            f"'{repo}' names a GGUF quantization; mlxcel's store holds MLX snapshots, named "
            "<owner>/<name> without a tag"
        )
    if not _REPO.fullmatch(repo) or ".." in repo:
        raise HubError(f"'{repo}' is not a name the model store can hold (letters, digits, '.', '_', '-')")
    return repo


def snapshot_dir(repo: str) -> Path:
    return store_root() / check_repo(repo)


def set_token(token: str | None) -> None:
    """--hf-token, for the whole process (None: $HF_TOKEN, read at each download)."""
    _TOKEN["value"] = token


def token() -> str:
    return _TOKEN["value"] if _TOKEN["value"] is not None else os.environ.get("HF_TOKEN", "")


def valid_token(value: str) -> bool:
    """b10621's is_valid_hf_token: "hf_" and then 34 to 253 letters or digits."""
    return 37 <= len(value) <= 256 and value.startswith("hf_") and value[3:].isascii() and value[3:].isalnum()


def _headers(api: bool = False) -> dict[str, str]:
    value = token()
    if api and value and not valid_token(value):
        log.warning("api_get: invalid token, authentication disabled")
        return {}
    return {"Authorization": f"Bearer {value}"} if value else {}


def _unreachable(exc: Exception) -> HubError:
    reason = str(exc) or type(exc).__name__
    return HubError(f"cannot reach the hub at {endpoint()}: {reason}")


def _listing(client, repo: str) -> tuple[str, list[tuple[str, int | None, str | None]]]:
    """(revision, [(file, size, sha256)]) from the hub's model API."""
    url = f"{endpoint()}/api/models/{repo}/revision/main?blobs=true"
    r = client.get(url, headers=_headers(api=True))
    if r.status_code == 404:
        raise HubError(f"repository '{repo}' not found on {endpoint()}")
    if r.status_code != 200:
        raise HubError(f"the hub answered {r.status_code} for {repo}")
    try:
        data = r.json()
    except ValueError:
        raise HubError(f"{endpoint()} answered {repo}'s file listing with something other than JSON") from None
    files = []
    for s in data.get("siblings", []):
        name = s.get("rfilename", "")
        if not name or name.startswith("/") or ".." in Path(name).parts:
            raise HubError(f"the hub lists an unsafe file name {name!r} in {repo}")
        lfs = s.get("lfs") or {}
        files.append((name, lfs.get("size", s.get("size")), lfs.get("sha256")))
    return str(data.get("sha", "main")), files


def download(repo: str, on_progress: Callable[[dict], None] | None = None, progress_bar: bool = False) -> Path:  # noqa: C901
    """Fetch a snapshot into the store (resuming partial files); returns its directory."""
    # deferred: httpx (~0.1 s) only for a download; -m and `mlxcel list` read the store without it
    import httpx

    if offline():
        raise HubError(f"cannot download '{repo}': offline mode (--offline) is on")
    target = snapshot_dir(repo)
    with httpx.Client(follow_redirects=True, timeout=httpx.Timeout(30.0, read=300.0)) as client:
        try:
            revision, files = _listing(client, repo)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # no network, a refused port, a bad endpoint
            raise _unreachable(exc) from None
        if not any(f == "config.json" for f, _, _ in files):
            raise HubError(f"'{repo}' holds no config.json: not an MLX checkpoint")
        target.mkdir(parents=True, exist_ok=True)
        total = sum(size or 0 for _, size, _ in files)
        done = 0
        # config.json last: a snapshot is a model only once every other file is in place
        for name, size, sha in sorted(files, key=lambda f: f[0] == "config.json"):
            dst = target / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            if dst.is_file() and (size is None or dst.stat().st_size == size) and (sha is None or _sha256(dst) == sha):
                done += size or 0
                continue
            quoted = urllib.parse.quote(name)

            def progress(n: int, base: int = done, name: str = name) -> None:
                if on_progress is not None:
                    on_progress({"url": f"{repo}/{name}", "downloaded": base + n, "total": total})
                if progress_bar:
                    _bar(name, base + n, total)

            try:
                _fetch(client, f"{endpoint()}/{repo}/resolve/{revision}/{quoted}", dst, size, sha, progress)
            except httpx.HTTPError as exc:
                raise HubError(
                    f"the download of {repo}/{name} broke off ({type(exc).__name__}); run it again to resume"
                ) from None
            done += size or dst.stat().st_size
        if progress_bar:
            sys.stderr.write("\n")
    return target


def _fetch(client, url: str, dst: Path, size: int | None, sha: str | None, progress: Callable[[int], None]) -> None:
    part = dst.with_name(dst.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    headers = dict(_headers())
    if have:
        headers["Range"] = f"bytes={have}-"
    with client.stream("GET", url, headers=headers) as r:
        if r.status_code == 416:  # the part is already whole
            pass
        elif r.status_code == 206 and have:
            mode = "ab"
        elif r.status_code == 200:
            have, mode = 0, "wb"
        else:
            raise HubError(f"the hub answered {r.status_code} for {url}")
        if r.status_code != 416:
            with open(part, mode) as out:
                for chunk in r.iter_raw():  # as it arrives: a broken download keeps what came
                    out.write(chunk)
                    have += len(chunk)
                    progress(have)
    if size is not None and part.stat().st_size != size:
        raise HubError(
            f"{dst.name}: got {part.stat().st_size} bytes, the hub lists {size} (the download resumes "
            "from here next time)"
        )
    if sha is not None and _sha256(part) != sha:
        part.unlink()
        raise HubError(f"{dst.name}: its SHA-256 does not match the hub's; the partial file was removed")
    os.replace(part, dst)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _bar(name: str, done: int, total: int) -> None:
    width = 30
    frac = done / total if total else 1.0
    filled = int(frac * width)
    sys.stderr.write(
        f"\r{name[:40]:40s} [{'#' * filled}{'.' * (width - filled)}] {frac * 100:5.1f}% "
        f"{done / 1e6:8.1f}/{total / 1e6:.1f} MB"
    )
    sys.stderr.flush()


def list_snapshots(root: Path | None = None) -> list[str]:
    """The store's `<owner>/<name>` snapshots that hold a checkpoint."""
    root = store_root() if root is None else root
    out = []
    if not root.is_dir():
        return out
    for owner in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        if (owner / "config.json").is_file() or (owner / STAMP).is_file():
            continue  # a checkpoint itself (a bundled model, its sub-modules such as 1_Pooling), not an owner
        for model in sorted(p for p in owner.iterdir() if p.is_dir() and not p.is_symlink()):
            if (model / "config.json").is_file():
                out.append(f"{owner.name}/{model.name}")
    return out


def remove_snapshot(repo: str) -> bool:
    """Delete a snapshot from the store (never anything outside it); False when there was none."""
    target = snapshot_dir(repo)
    root = store_root().resolve()
    resolved = target.resolve()
    if root not in resolved.parents:
        raise HubError(f"'{repo}' is not inside the model store")
    if not target.exists():
        return False
    shutil.rmtree(target)
    owner = target.parent
    if owner != store_root() and not any(owner.iterdir()):
        owner.rmdir()
    return True
