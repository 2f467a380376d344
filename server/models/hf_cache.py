"""b10621's Hugging Face cache (common/hf-cache.cpp): where -hf downloads go and how they are found offline.

The cache is $LLAMA_CACHE, else $HF_HUB_CACHE / $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
$XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub: the layout huggingface_hub writes
(models--<owner>--<name>/{refs/<branch>, blobs/<oid>, snapshots/<commit>/<path> -> ../../blobs/<oid>}), so a
model b10621 or huggingface-cli fetched is found here and the other way round. The hub's model API gives the
branch's commit (/api/models/<repo>/refs) and its files (/api/models/<repo>/tree/<commit>?recursive=true).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..build import build_info
from .hub import valid_token  # b10621's is_valid_hf_token, one place

log = logging.getLogger("mlxcel.models")

_HEX40, _HEX64 = re.compile(r"[0-9a-fA-F]{40}"), re.compile(r"[0-9a-fA-F]{64}")


class HFError(RuntimeError):
    """What the hub answered that stops a resolution (b10621's words where it has them)."""


@dataclass(frozen=True)
class HFFile:
    repo: str
    path: str  # within the repository
    url: str = ""
    local_path: str = ""  # where the download goes (blobs/<oid>, or the snapshot's path)
    final_path: str = ""  # snapshots/<commit>/<path>


def cache_dir() -> Path:
    for var, sub in (
        ("LLAMA_CACHE", ""),
        ("HF_HUB_CACHE", ""),
        ("HUGGINGFACE_HUB_CACHE", ""),
        ("HF_HOME", "hub"),
        ("XDG_CACHE_HOME", "huggingface/hub"),
        ("HOME", ".cache/huggingface/hub"),
    ):
        if os.environ.get(var):
            return Path(os.environ[var]) / sub if sub else Path(os.environ[var])
    return Path.home() / ".cache" / "huggingface" / "hub"


def repo_path(repo: str) -> Path:
    return cache_dir() / ("models--" + repo.replace("/", "--"))


def valid_repo_id(repo: str) -> bool:
    """is_valid_repo_id: [A-Za-z0-9_] runs joined by single '/', '.', '-', exactly one '/'."""
    return (
        0 < len(repo) <= 256 and repo.count("/") == 1 and re.fullmatch(r"\w+(?:[/.-]\w+)*", repo, re.ASCII) is not None
    )


def endpoint() -> str:
    """common_get_model_endpoint: $MODEL_ENDPOINT, else $HF_ENDPOINT, else huggingface.co; with a final '/'."""
    url = os.environ.get("MODEL_ENDPOINT") or os.environ.get("HF_ENDPOINT") or "https://huggingface.co/"
    return url if url.endswith("/") else url + "/"


def user_agent() -> str:
    return f"llama-cpp/{build_info()}"


def _within(base: Path, sub: str) -> bool:
    if os.path.isabs(sub):
        return False
    b = os.path.normpath(os.path.abspath(base))
    return os.path.normpath(os.path.join(b, sub)).startswith(b + os.sep)


def _api_get(client, url: str, token: str):
    headers = {"User-Agent": user_agent(), "Accept": "application/json"}
    if valid_token(token):
        headers["Authorization"] = f"Bearer {token}"
    elif token:
        log.warning("api_get: invalid token, authentication disabled")
    r = client.get(url, headers=headers)
    if r.status_code == 200:
        return r.json()
    body = r.text
    try:
        body = r.json()["error"]
    except (ValueError, KeyError, TypeError):
        pass
    raise HFError(f"GET failed ({r.status_code}): {body}")


def _commit(client, repo: str, token: str) -> str:
    """The main branch's commit (else the first valid branch's), written to refs/<branch>; "" when none."""
    try:
        data = _api_get(client, f"{endpoint()}api/models/{repo}/refs", token)
    except (HFError, ValueError) as exc:
        log.error("get_repo_commit: error: %s", exc)
        return ""
    refs = repo_path(repo) / "refs"
    name = commit = ""
    for branch in data.get("branches", []) if isinstance(data, dict) else []:
        b, c = branch.get("name"), branch.get("targetCommit")
        if not isinstance(b, str) or not isinstance(c, str) or not _within(refs, b) or not _HEX40.fullmatch(c):
            continue
        if b == "main":
            name, commit = b, c
            break
        if not name:
            name, commit = b, c
    if not commit:
        log.warning("get_repo_commit: no valid branch for '%s'", repo)
        return ""
    (refs / name).parent.mkdir(parents=True, exist_ok=True)
    (refs / name).write_text(commit)
    return commit


def repo_files(client, repo: str, token: str) -> list[HFFile]:
    """get_repo_files: the repository's files at its branch's commit, each with where it downloads."""
    if not valid_repo_id(repo):
        log.warning("get_repo_files: invalid repository: %s", repo)
        return []
    commit = _commit(client, repo, token)
    if not commit:
        log.warning("get_repo_files: failed to resolve commit for %s", repo)
        return []
    snapshot, blobs = repo_path(repo) / "snapshots" / commit, repo_path(repo) / "blobs"
    try:
        items = _api_get(client, f"{endpoint()}api/models/{repo}/tree/{commit}?recursive=true", token)
    except (HFError, ValueError) as exc:
        log.error("get_repo_files: error: %s", exc)
        return []
    out = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict) or item.get("type") != "file" or not isinstance(item.get("path"), str):
            continue
        path = item["path"]
        if not _within(snapshot, path):
            log.warning("get_repo_files: skip invalid path: %s", path)
            continue
        lfs = item.get("lfs")
        oid = lfs.get("oid", "") if isinstance(lfs, dict) else item.get("oid", "")
        oid = oid if isinstance(oid, str) else ""
        if oid and not (_HEX40.fullmatch(oid) or _HEX64.fullmatch(oid)):
            log.warning("get_repo_files: skip invalid oid: %s", oid)
            continue
        final = snapshot / path
        local = blobs / oid if oid and not final.exists() else final
        out.append(HFFile(repo, path, f"{endpoint()}{repo}/resolve/{commit}/{path}", str(local), str(final)))
    return out


def cached_files(repo: str) -> list[HFFile]:
    """get_cached_files: the snapshot of the cached ref (main first) of the repository, offline."""
    base = repo_path(repo)
    refs = base / "refs"
    commit = ""
    if refs.is_dir():
        for ref in sorted(refs.iterdir(), key=lambda p: p.name != "main"):
            text = ref.read_text().strip() if ref.is_file() else ""
            if _HEX40.fullmatch(text):
                commit = text
                break
    snapshot = base / "snapshots" / commit
    if not commit or not snapshot.is_dir():
        return []
    out = []
    for f in sorted(snapshot.rglob("*")):
        if f.is_file() or f.is_symlink():
            rel = f.relative_to(snapshot).as_posix()
            out.append(HFFile(repo, rel, "", str(f), str(f)))
    return out


def finalize(file: HFFile) -> str:
    """The snapshot's path for a downloaded blob: a relative symlink (huggingface_hub's layout), else moved."""
    local, final = Path(file.local_path), Path(file.final_path)
    if local == final or final.exists() or not local.exists():
        return file.final_path
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        final.symlink_to(os.path.relpath(local, final.parent))
    except OSError:
        local.replace(final)
    return file.final_path
