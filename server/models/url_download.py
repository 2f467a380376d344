"""-mu/--model-url URL: a GGUF fetched from a plain URL as b10621 fetches it (common_download_file_single): into
-m's path, an ETag kept beside it (FILE.etag) so that a later start downloads again only when the server's
changed; with --offline, or when the server cannot be asked, the copy there is used. The body goes to
FILE.downloadInProgress (resumed where the server takes ranges), renamed once whole, three attempts.

(b10621 starts in router mode when -mu comes without -m: its download only runs for a single model's start,
whose path -m names; mlxcel does the same.)"""

from __future__ import annotations

import re
from pathlib import Path

from . import hf_cache, hf_download
from .hf_cache import HFError

_SPLIT = re.compile(r"-\d{5}-of-(\d{5})\.gguf$")


def fetch(url: str, path: str, token: str, offline: bool) -> None:  # noqa: C901 (upstream's decisions, in order)
    """The file at `url` into `path`, as common_download_file_single_online decides; HFError with b10621's
    words when it cannot be had."""
    import httpx  # deferred: only a start with -mu pays for it

    target = Path(path)
    if _SPLIT.search(url.split("#")[0].split("?")[0]):
        raise HFError(
            f"{url} is one part of a GGUF split into several files, which mlxcel does not load as one model: merge "
            "them (llama-gguf-split --merge) and pass -m FILE.gguf"
        )
    if offline:
        if not target.exists():
            raise HFError(f"required file is not available in cache (offline mode): {path}")
        return
    headers = {"User-Agent": hf_cache.user_agent()}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    etag_file = Path(str(target) + ".etag")
    with httpx.Client(follow_redirects=True, timeout=httpx.Timeout(30.0, read=300.0), headers=headers) as client:
        try:
            head = client.head(url)
            status = head.status_code
        except httpx.HTTPError:
            head, status = None, -1
        if head is None or not 200 <= status < 300:
            if target.exists():  # (the server cannot say: the copy here stands)
                return
            raise HFError(f"Download '{url}' failed with status code: {status}")
        etag = head.headers.get("etag", "")
        if target.exists():
            known = etag_file.read_text().split("\n")[0] if etag_file.exists() else ""
            if not etag or known == etag:
                return
            target.unlink()
        if not hf_download.download_into(client, url, target, head.headers.get("accept-ranges", "none") != "none"):
            raise HFError(f"Download '{url}' failed with status code: -1")
        if etag:
            etag_file.write_text(etag)
