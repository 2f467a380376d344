"""file:// media under --media-path: b10621's handle_media rules, then what a string check cannot do.

b10621 refuses a file:// URL without --media-path, validates the path with fs_validate_filename(path,
allow_subdirs=true) and reads media_path + path. mlxcel keeps those rules and their sentences and adds: the
leading separators stripped before the join (the root is never replaced), an absolute path accepted as a
fallback only when it names a file inside the root, no percent-encoded '.', '/', '\\' or NUL, the joined
path canonicalized and contained in the canonical root (a symlink out of it is refused), an open that does
not follow a last-component symlink, and regular files only (a FIFO cannot hold a request waiting).
"""

from __future__ import annotations

import os
import re
import stat

FILE_URL = "file://"
NEEDS_MEDIA_PATH = "file:// URLs are not allowed unless --media-path is specified"
MAX_NAME_BYTES = 255

_FORBIDDEN = {ord(c) for c in ':*?"<>|'} | {0x7F, 0xFF0E, 0x2215, 0x2216, 0xFFFD, 0xFEFF}
_PERCENT_TRAVERSAL = re.compile(r"%(2e|2f|5c|00)", re.IGNORECASE)


class MediaPathRefused(ValueError):
    """A file:// reference refused; the message is the response's (400)."""


def valid_filename(name: str, allow_subdirs: bool = True) -> bool:
    """common/common.cpp fs_validate_filename."""
    if not name or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return False
    for ch in name:
        c = ord(ch)
        if c <= 0x1F or 0x80 <= c <= 0x9F or 0xD800 <= c <= 0xDFFF or c in _FORBIDDEN:
            return False
        if not allow_subdirs and ch in "/\\":
            return False
    if name[0] == " " or name[-1] in " .":
        return False
    return ".." not in name and name != "."


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def resolve(root: str, url: str) -> str:
    """The canonical path a file:// URL names under the media root; MediaPathRefused otherwise."""
    if not root:
        raise MediaPathRefused(NEEDS_MEDIA_PATH)
    file_path = url[len(FILE_URL) :] if url.startswith(FILE_URL) else url
    if not valid_filename(file_path) or _PERCENT_TRAVERSAL.search(file_path):
        raise MediaPathRefused(f"file path is not allowed: {file_path}")
    real_root = os.path.realpath(root)
    joined = os.path.realpath(os.path.join(real_root, file_path.lstrip("/\\")))
    if os.path.exists(joined):
        if not _inside(joined, real_root):
            raise MediaPathRefused(f"file path escapes the --media-path root: {file_path}")
        return joined
    if os.path.isabs(file_path):  # the absolute spelling of a file inside the root
        absolute = os.path.realpath(file_path)
        if not _inside(absolute, real_root):
            raise MediaPathRefused(f"file path escapes the --media-path root: {file_path}")
        if os.path.exists(absolute):
            return absolute
    raise MediaPathRefused(f"file does not exist or cannot be opened: {file_path} (paths resolve against --media-path)")


def read(root: str, url: str, max_bytes: int) -> bytes:
    """The bytes of the regular file a file:// URL names under the root, at most max_bytes."""
    path = resolve(root, url)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    file_path = url[len(FILE_URL) :] if url.startswith(FILE_URL) else url
    try:
        fd = os.open(path, flags)
    except OSError:
        raise MediaPathRefused(f"file does not exist or cannot be opened: {file_path}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MediaPathRefused(f"file path is not a regular file: {file_path}")
        if info.st_size > max_bytes:
            raise MediaPathRefused(f"file is larger than {max_bytes} bytes: {file_path}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(max_bytes + 1)[:max_bytes]
    finally:
        os.close(fd)
