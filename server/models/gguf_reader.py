"""gguf-py's GGUFReader with its one slow path replaced: an array of strings (a vocabulary's tokens and merges).

gguf-py reads each string as two numpy.memmap views, whose construction costs ~20 us each: a 151k-token
vocabulary with its merges (300k strings) took 16 s of a Qwen GGUF's 20 s conversion. Here the same parts are
views of a plain ndarray over the same mapping, so fields, `contents()` and the tensors are gguf-py's own.
"""

from __future__ import annotations

from typing import Callable

import gguf
import numpy as np

_STRING, _ARRAY = gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY
PROGRESS_EVERY = 4096  # strings between progress calls


class FastGGUFReader(gguf.GGUFReader):
    def __init__(self, path: str, progress: Callable[[int], None] | None = None):
        self._progress = progress  # called with the header offset reached, now and then
        super().__init__(path)

    def _get_field_parts(self, orig_offs: int, raw_type: int):
        if raw_type != _ARRAY or self.byte_order != "I":
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype = self._get(orig_offs, np.uint32)
        if int(raw_itype[0]) != _STRING:
            return super()._get_field_parts(orig_offs, raw_type)
        alen = self._get(orig_offs + 4, np.uint64)
        plain = self.data.view(np.ndarray)  # the same bytes without memmap's per-view bookkeeping
        parts: list[np.ndarray] = [raw_itype, alen]
        offs = orig_offs + 12
        for i in range(int(alen[0])):
            length = plain[offs : offs + 8].view(np.uint64)
            n = int(length[0])
            parts += (length, plain[offs + 8 : offs + 8 + n])
            offs += 8 + n
            if self._progress is not None and i % PROGRESS_EVERY == 0:
                self._progress(offs)
        data_idxs = list(range(3, len(parts), 2))  # each string's bytes
        return offs - orig_offs, parts, data_idxs, [gguf.GGUFValueType(raw_type), _STRING]


def header_of(path) -> tuple[Callable, dict]:
    """A GGUF's metadata as `key(name, default=None)` and its tensors by name (data mapped, not read)."""
    reader = FastGGUFReader(str(path))

    def key(name: str, default=None):
        f = reader.fields.get(name)
        return default if f is None else f.contents()

    return key, {t.name: t for t in reader.tensors}
