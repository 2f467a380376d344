"""Slot save files (--slot-save-path): b10621's filename rule, confinement to the directory, atomic writes, and
mlxcel's file format, bound to the model and tokenizer that saved it.

A file holds the slot's tokens, not its KV: restoring recomputes the KV in the cold run's chunks (so a request
after a restore computes what it would have computed had the slot never been emptied) and offers it to the
prompt cache. b10621's files hold its KV cache in llama_state_seq format, which only libllama reads.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"MLXCELSLOT\x00\x01"
FORBIDDEN = set(':*?"<>|')


def valid_filename(name: str) -> bool:
    """common/common.cpp fs_validate_filename (allow_subdirs false), rule for rule."""
    raw = name.encode("utf-8", "surrogatepass")
    if not raw or len(raw) > 255:
        return False
    try:
        text = raw.decode("utf-8")  # strict: overlong forms and surrogates are invalid UTF-8 here too
    except UnicodeDecodeError:
        return False
    for ch in text:
        c = ord(ch)
        if (
            c <= 0x1F
            or c == 0x7F
            or 0x80 <= c <= 0x9F
            or c in (0xFF0E, 0x2215, 0x2216, 0xFFFD, 0xFEFF)
            or 0xD800 <= c <= 0xDFFF
            or ch in FORBIDDEN
            or ch in "/\\"
        ):
            return False
    if text[0] == " " or text[-1] in " .":
        return False
    return ".." not in text and text != "."


class SlotFileError(Exception):
    """A file that cannot be written or read as a slot file (the route words the error as b10621 does)."""


def confined(directory: str, filename: str) -> Path:
    """directory/filename, refused when the canonical path leaves the directory (a symlink pointing out)."""
    root = Path(os.path.realpath(directory))
    path = root / filename
    real = Path(os.path.realpath(path))
    if real.parent != root or path.is_symlink():
        raise SlotFileError(f"{filename} leaves the slot directory")
    return path


@dataclass(frozen=True)
class Identity:
    """What a slot file is bound to: the model's weights and configuration, and the tokenizer."""

    model: str
    tokenizer: str

    @classmethod
    def of(cls, checkpoint: Path) -> "Identity":
        model = hashlib.sha256()
        model.update((checkpoint / "config.json").read_bytes())
        for weights in sorted(checkpoint.glob("*.safetensors")):
            model.update(f"{weights.name}:{weights.stat().st_size}".encode())
        tokenizer = hashlib.sha256((checkpoint / "tokenizer.json").read_bytes())
        return cls(model.hexdigest(), tokenizer.hexdigest())


def write(path: Path, tokens: list[int], identity: Identity) -> int:
    """Write atomically (a temporary file in the same directory, then renamed); returns the bytes written.
    A failure (a full disk) leaves no file behind, and an older file of that name untouched."""
    header = json.dumps({"model": identity.model, "tokenizer": identity.tokenizer, "n_tokens": len(tokens)}).encode()
    body = MAGIC + struct.pack("<I", len(header)) + header + struct.pack(f"<{len(tokens)}i", *tokens)
    fd, tmp = tempfile.mkstemp(prefix=".slot-", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # as a plain open() would create it
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return len(body)


def read(path: Path, identity: Identity) -> tuple[list[int], int]:
    """(tokens, bytes read); SlotFileError for a file that is not one of this model's slot files."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise SlotFileError(str(exc)) from None
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        raise SlotFileError("not a slot file")
    (n_header,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    try:
        header = json.loads(data[start : start + n_header])
    except ValueError:
        raise SlotFileError("damaged header") from None
    if header.get("model") != identity.model or header.get("tokenizer") != identity.tokenizer:
        raise SlotFileError("saved by another model or tokenizer")
    n = header.get("n_tokens")
    body = data[start + n_header :]
    if not isinstance(n, int) or len(body) != 4 * n:
        raise SlotFileError("damaged token list")
    return list(struct.unpack(f"<{n}i", body)), len(data)
