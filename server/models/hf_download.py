"""-hf REPO[:QUANT] / -hff FILE resolved as b10621 resolves them (common/download.cpp): the repository's files at
its main commit, the GGUF picked by quant (the :QUANT tag, else Q4_K_M, else Q8_0, else the first model file),
downloaded into b10621's Hugging Face cache (models/hf_cache.py) with a resumable .downloadInProgress file, and
found there again offline. --offline reads the cache only.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import hf_cache
from .hf_cache import HFError, HFFile
from .hub import BAD_REPO

log = logging.getLogger("mlxcel.models")

DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")
SIDECARS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")  # never the model itself
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)


def split_repo_tag(spec: str) -> tuple[str, str]:
    parts = spec.split(":")
    tag = parts[-1] if len(parts) > 1 else ""
    if len(parts[0].split("/")) != 2:
        raise HFError(BAD_REPO)
    return parts[0], tag


def split_info(path: str) -> tuple[str, int, int]:
    """get_gguf_split_info's (prefix, index, count): a -00001-of-00003 file is part 1 of 3."""
    if not path.endswith(".gguf"):
        return "", 1, 1
    prefix = path[: -len(".gguf")]
    m = _SPLIT.match(prefix)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else (prefix, 1, 1)


def is_model(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".gguf") and not any(s in name for s in SIDECARS)


def best_model(files: list[HFFile], tag: str) -> HFFile | None:
    """find_best_model: the first model file whose name has the tag (then Q4_K_M, Q8_0) followed by '.' or '-'
    (case-insensitive, a split's first part); without a tag, else the first model file."""
    for t in [tag] if tag else DEFAULT_QUANTS:
        pattern = re.compile(re.escape(t) + "[.-]", re.IGNORECASE)
        for f in files:
            if is_model(f.path) and pattern.search(f.path) and split_info(f.path)[1] == 1:
                return f
    if not tag:
        return next((f for f in files if is_model(f.path) and split_info(f.path)[1] == 1), None)
    return None


_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


def quant_bits(path: str) -> int:
    """extract_quant_bits: the digits that open the file's quant tag (Q4_K_M 4, F16 16), 0 without one."""
    prefix = split_info(path)[0]
    m = _TAG.search(prefix) if prefix else None
    digits = re.search(r"[0-9]+", m.group(1)) if m else None
    return int(digits.group(0)) if digits else 0


def best_sibling(files: list[HFFile], model: str, keyword: str) -> HFFile | None:
    """find_best_sibling: the GGUF named with `keyword` in the model's directory or one above it, the deepest
    shared directory first, then the quant closest to the model's (the first found on a tie)."""
    model_dirs = model.split("/")[:-1]
    model_bits = quant_bits(model)
    best, best_key = None, None
    for f in files:
        if not f.path.endswith(".gguf") or keyword not in f.path:
            continue
        dirs = f.path.split("/")[:-1]
        depth = 0
        while depth < min(len(dirs), len(model_dirs)) and dirs[depth] == model_dirs[depth]:
            depth += 1
        if depth != len(dirs):  # (a sibling lies on the model's own path)
            continue
        key = (-depth, abs(quant_bits(f.path) - model_bits))
        if best_key is None or key < best_key:
            best, best_key = f, key
    return best


def _list_gguf(files: list[HFFile]) -> None:
    log.info("Available GGUF files:")
    for f in files:
        if f.path.endswith(".gguf"):
            log.info(" - %s", f.path)


@dataclass
class Plan:
    primary: HFFile | None = None
    model_files: list[HFFile] = field(default_factory=list)
    mmproj: HFFile | None = None


def plan(spec: str, hf_file: str, token: str, offline: bool) -> Plan:
    """common_download_get_hf_plan (without the drafters' sidecars, which mlxcel does not run)."""
    import httpx  # deferred: only a -hf start pays for it

    repo, tag = split_repo_tag(spec)
    files: list[HFFile] = []
    if not offline:
        with httpx.Client(follow_redirects=True, timeout=30.0) as client:
            try:
                files = hf_cache.repo_files(client, repo, token)
            except httpx.HTTPError as exc:
                log.error("get_repo_files: error: HTTPLIB failed: %s", exc)
    if not files:
        files = hf_cache.cached_files(repo)
    out = Plan()
    if not files:
        return out
    if hf_file:
        primary = next((f for f in files if f.path == hf_file), None)
        if primary is None:
            log.error("common_download_get_hf_plan: file '%s' not found in repository", hf_file)
            _list_gguf(files)
            return out
    else:
        primary = best_model(files, tag)
        if primary is None:
            log.error("common_download_get_hf_plan: no GGUF files found in repository %s", repo)
            _list_gguf(files)
            return out
    prefix, _, count = split_info(primary.path)
    out.primary = primary
    out.model_files = (
        [primary]
        if count <= 1
        else [f for f in files if split_info(f.path)[0] == prefix and split_info(f.path)[2] == count]
    )
    out.mmproj = best_sibling(files, primary.path, "mmproj")
    return out


def fetch(file: HFFile, token: str, offline: bool) -> None:
    """common_download_file_single for a hub file: a blob already there is used as is (its name is its hash);
    otherwise HEAD, then GET into <blob>.downloadInProgress (resumed with a Range where the hub accepts ranges),
    renamed into place once whole; 3 attempts, 2 then 4 s apart."""
    import httpx  # deferred: only a -hf start pays for it

    path = Path(file.local_path)
    if path.exists():
        return
    if offline:
        raise HFError(f"required file is not available in cache (offline mode): {path}")
    headers = {"User-Agent": hf_cache.user_agent()}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    with httpx.Client(follow_redirects=True, timeout=httpx.Timeout(30.0, read=300.0), headers=headers) as client:
        try:
            head = client.head(file.url)
        except httpx.HTTPError as exc:
            raise HFError(f"Download '{file.url}' failed with status code: -1 ({exc})") from None
        if not 200 <= head.status_code < 300:
            raise HFError(f"Download '{file.url}' failed with status code: {head.status_code}")
        if not download_into(client, file.url, path, head.headers.get("accept-ranges", "none") != "none"):
            raise HFError(f"Download '{file.url}' failed with status code: -1")


def download_into(client, url: str, path: Path, ranges: bool) -> bool:
    """common_download_file_single_online's attempts: the body into <path>.downloadInProgress (resumed where the
    server takes ranges), renamed into place once whole; 3 attempts, 2 then 4 s apart. Whether it got there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = Path(str(path) + ".downloadInProgress")
    for tries in range(3):
        if tries:
            log.warning("common_download_file_single_online: retrying after %d seconds...", 1 << tries)
            time.sleep(1 << tries)
        if attempt(client, url, part, ranges):
            part.replace(path)
            return True
    log.error("common_download_file_single_online: download failed after 3 attempts")
    return False


def attempt(client, url: str, part: Path, ranges: bool) -> bool:
    """One GET of url into part (resumed from its size where the server takes ranges); whether it is whole."""
    import httpx  # deferred: only a -hf start pays for it

    if part.exists() and not ranges:
        part.unlink()
    try:
        return _pull(client, url, part, part.stat().st_size if part.exists() else 0)
    except httpx.HTTPError as exc:
        log.warning("common_pull_file: download failed: %s", exc)
        return False


def _pull(client, url: str, part: Path, have: int) -> bool:
    headers = {"Range": f"bytes={have}-"} if have else {}
    with client.stream("GET", url, headers=headers) as r:
        if (have and r.status_code != 206) or (not have and r.status_code != 200):
            log.warning("common_pull_file: download received non-successful status code: %d", r.status_code)
            return False
        total = have + int(r.headers.get("content-length", 0) or 0)
        done = have
        with open(part, "ab") as out:
            for chunk in r.iter_bytes(1 << 20):
                out.write(chunk)
                done += len(chunk)
                if sys.stderr.isatty() and total:
                    sys.stderr.write(f"\r{part.name[:40]}: {100 * done // total:3d}%")
        if sys.stderr.isatty() and total:
            sys.stderr.write("\n")
        return done >= total if total else True


def resolve(spec: str, hf_file: str, token: str, offline: bool) -> str:
    """The local path of -hf's model GGUF (downloaded when needed); HFError with b10621's words when none."""
    return resolve_with_projector(spec, hf_file, token, offline, projector=False)[0]


def resolve_with_projector(
    spec: str, hf_file: str, token: str, offline: bool, projector: bool
) -> tuple[str, str | None]:
    """-hf's model GGUF and, when `projector` (b10621's download_mmproj: --mmproj-auto, no --mmproj given), the
    repository's projector beside it, both fetched; (model path, projector path or None)."""
    p = plan(spec, hf_file, token, offline)
    if p.primary is None:
        raise HFError("failed to download model from Hugging Face")
    if len(p.model_files) > 1:  # (b10621 loads the parts; mlxcel's GGUF import reads one file)
        raise HFError(
            f"{p.primary.path} is split into {len(p.model_files)} GGUF files, which mlxcel does not load as one "
            "model: merge them (llama-gguf-split --merge) and pass -m FILE.gguf"
        )
    fetched = [*p.model_files, *([p.mmproj] if projector and p.mmproj is not None else [])]
    for f in fetched:
        fetch(f, token, offline)
    paths = [hf_cache.finalize(f) for f in fetched]
    mmproj = paths[-1] if len(fetched) > len(p.model_files) else None
    return paths[p.model_files.index(p.primary)], mmproj
