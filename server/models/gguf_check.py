"""A GGUF file's container checked as b10621 reads it, before anything converts it: gguf_init_from_reader's
checks (magic, version, counts, key-value pairs, tensor infos, the data section's layout) and then
llama_model_loader's (every tensor's data inside the file), each failure named in upstream's own words
(ggml/src/gguf.cpp, src/llama-model-loader.h). The gguf package's reader, given a damaged file, fails with
numpy's errors (an IndexError, a reshape) that name neither the file nor the problem."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import gguf

GGUF_VERSION = 3  # the newest b10621 reads
DEFAULT_ALIGNMENT = 32
MAX_STRING_LENGTH = 1024 * 1024 * 1024
MAX_NAME = 64  # GGML_MAX_NAME
MAX_DIMS = 4
TYPE_COUNT = 43  # GGML_TYPE_COUNT
SIZE_MAX = (1 << 64) - 1
INT64_MAX = (1 << 63) - 1
_ARRAY, _STRING = 9, 8
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # gguf_type -> bytes
_UINT32 = 4
_TYPE_NAMES = {
    0: "u8",
    1: "i8",
    2: "u16",
    3: "i16",
    4: "u32",
    5: "i32",
    6: "f32",
    7: "bool",
    8: "str",
    9: "arr",
    10: "u64",
    11: "i64",
    12: "f64",
}


class DamagedGGUF(ValueError):
    """A GGUF file b10621 would refuse to load. Its message is the one line a user sees: the file, and
    b10621's words for what is wrong with it (`problem`)."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(f"failed to load model '{Path(path)}': {problem}")
        self.problem = problem


def _blocks(ggml_type: int) -> tuple[int, int] | None:
    """(block size, bytes per block) of a ggml type; (0, 0) for a type whose support was removed; None for
    one the gguf package does not know (its size then goes unchecked here; the converter refuses it)."""
    try:
        return gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        return (0, 0) if ggml_type in (4, 5, 31, 32, 33, 36, 37, 38) else None


class _Reader:
    """gguf_reader: reads that fail (False) past the end of the file, never raise."""

    def __init__(self, f, size: int):
        self.f, self.pos, self.size = f, 0, size

    @property
    def remain(self) -> int:
        return self.size - self.pos

    def raw(self, n: int) -> bytes | None:
        if n > self.remain:
            return None
        data = self.f.read(n)
        self.pos += len(data)
        return data if len(data) == n else None

    def skip(self, n: int) -> bool:
        if n > self.remain:
            return False
        self.pos += n
        self.f.seek(self.pos)
        return True

    def unpack(self, fmt: str):
        data = self.raw(struct.calcsize(fmt))
        return None if data is None else struct.unpack(fmt, data)[0]

    def string(self, errors: list[str]) -> str | None:
        n = self.unpack("<Q")
        if n is None:
            return None
        if n > MAX_STRING_LENGTH:
            errors.append(f"string length {n} exceeds maximum {MAX_STRING_LENGTH}")
            return None
        if n > self.remain:
            errors.append(f"string length {n} exceeds remaining file size {self.remain} bytes")
            return None
        data = self.raw(n)
        return None if data is None else data.decode("utf-8", "replace")


def check_gguf(path: str | os.PathLike) -> int:
    """Raises DamagedGGUF with b10621's message for the first problem it would report, else returns where the
    tensor data starts (the header's size)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            problem = _problem(_Reader(f, size), size)
    except IsADirectoryError:  # b10621's fopen opens a directory and then reads nothing from it
        problem = "failed to read magic"
    except OSError as exc:
        problem = f"failed to open GGUF file '{path}' ({os.strerror(exc.errno or 0)})"
    if isinstance(problem, str):
        raise DamagedGGUF(path, problem)
    return problem


def _problem(r: _Reader, file_size: int) -> str | int:  # noqa: C901
    """The problem, or (none) where the tensor data starts."""
    errors: list[str] = []  # upstream's logged lines, most specific first; the first is the one reported

    def fail(generic: str) -> str:
        return (errors + [generic])[0]

    magic = r.raw(4)
    if magic is None:
        return "failed to read magic"
    if magic != b"GGUF":
        shown = "".join(chr(c) if 32 <= c < 127 else "?" for c in magic)
        return f"invalid magic characters: '{shown}', expected 'GGUF'"
    version = r.unpack("<I")
    if version is not None:
        if version == 0:
            errors.append(f"bad GGUF version: {version}")
        elif version & 0xFFFF == 0:
            errors.append(
                f"failed to load model: this GGUF file version {version} is extremely large, is there a "
                "mismatch between the host and model endianness?"
            )
        elif version == 1:
            errors.append("GGUFv1 is no longer supported, please use a more up-to-date version")
        elif version > GGUF_VERSION:
            errors.append(
                f"this GGUF file is version {version} but this software only supports up to version {GGUF_VERSION}"
            )
    n_tensors = r.unpack("<q") if version is not None and not errors else None
    if n_tensors is not None and not 0 <= n_tensors <= SIZE_MAX // 352:  # sizeof(gguf_tensor_info)
        errors.append(f"number of tensors is {n_tensors} but must be in [0, {SIZE_MAX // 352}]")
    n_kv = r.unpack("<q") if n_tensors is not None and not errors else None
    if n_kv is not None and not 0 <= n_kv <= SIZE_MAX // 48:  # sizeof(gguf_kv)
        errors.append(f"number of key value pairs is {n_kv} but must be in [0, {SIZE_MAX // 48}]")
    if n_kv is None or errors:
        return fail("failed to read header")

    keys: dict[str, tuple[int, object]] = {}
    for i in range(n_kv):
        key = r.string(errors)
        if key is None:
            return fail("failed to read key-value pairs")
        if not key:
            errors.append(f"key {i} is empty")
            return fail("failed to read key-value pairs")
        if key in keys:
            errors.append(f"duplicate key '{key}' for tensors {list(keys).index(key)} and {i}")
            return fail("failed to read key-value pairs")
        vtype = r.unpack("<i")
        n, is_array = 1, False
        if vtype == _ARRAY:
            is_array = True
            vtype = r.unpack("<i")
            n = r.unpack("<Q") if vtype is not None else None
        if vtype is None or n is None:
            return fail("failed to read key-value pairs")
        value: object = None
        if vtype == _STRING:
            if is_array and r.remain < n * 8:
                return fail("failed to read key-value pairs")
            for _ in range(n):
                value = r.string(errors)
                if value is None:
                    return fail("failed to read key-value pairs")
        elif vtype in _SCALAR_SIZES:
            width = _SCALAR_SIZES[vtype]
            if is_array:
                if not r.skip(n * width):
                    return fail("failed to read key-value pairs")
            else:
                value = r.raw(width)
                if value is None:
                    return fail("failed to read key-value pairs")
        else:
            errors.append(f"key '{key}' has invalid GGUF type {vtype}")
            return fail("failed to read key-value pairs")
        keys[key] = (vtype if not is_array else _ARRAY, value)

    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in keys:
        vtype, value = keys["general.alignment"]
        if vtype != _UINT32:
            return (
                f"key 'general.alignment' must be of type {_TYPE_NAMES[_UINT32]} but is {_TYPE_NAMES.get(vtype, '?')}"
            )
        alignment = struct.unpack("<I", value)[0]
    if alignment == 0 or alignment & (alignment - 1):
        return f"alignment {alignment} is not a power of 2"

    infos: list[tuple[str, int, int | None]] = []  # (name, offset, bytes)
    names: set[str] = set()
    for i in range(n_tensors):
        name = r.string(errors)
        if name is None:
            return fail("failed to read tensor info")
        if len(name.encode()) >= MAX_NAME:
            errors.append(f"tensor name {i} is too long: {len(name.encode())} >= {MAX_NAME}")
            return fail("failed to read tensor info")
        if name in names:
            j = [n for n, _, _ in infos].index(name)
            errors.append(f"duplicate tensor name '{name}' for tensors {j} and {i}")
            return fail("failed to read tensor info")
        names.add(name)
        n_dims = r.unpack("<I")
        if n_dims is None:
            return fail("failed to read tensor info")
        if n_dims > MAX_DIMS:
            errors.append(f"tensor '{name}' has invalid number of dimensions: {n_dims} > {MAX_DIMS}")
            return fail("failed to read tensor info")
        ne = [1] * MAX_DIMS
        for j in range(n_dims):
            ne[j] = r.unpack("<q")
            if ne[j] is None:
                return fail("failed to read tensor info")
            if ne[j] < 0:
                errors.append(f"tensor '{name}' dimension {j} has invalid number of elements: {ne[j]} < 0")
                return fail("failed to read tensor info")
        elements = ne[0] * ne[1] * ne[2] * ne[3]
        if elements > 0 and (
            INT64_MAX // ne[1] <= ne[0]
            or INT64_MAX // ne[2] <= ne[0] * ne[1]
            or INT64_MAX // ne[3] <= ne[0] * ne[1] * ne[2]
        ):
            errors.append(
                f"total number of elements in tensor '{name}' with shape ({ne[0]}, {ne[1]}, {ne[2]}, "
                f"{ne[3]}) is >= {INT64_MAX}"
            )
            return fail("failed to read tensor info")
        ggml_type = r.unpack("<i")
        if ggml_type is None:
            return fail("failed to read tensor info")
        if not 0 <= ggml_type < TYPE_COUNT:
            errors.append(f"tensor '{name}' has invalid ggml type {ggml_type}. should be in [0, {TYPE_COUNT})")
            return fail("failed to read tensor info")
        blocks = _blocks(ggml_type)
        nbytes = None
        if blocks is not None:
            block, type_size = blocks
            if block == 0 or ne[0] % block:
                try:
                    type_name = gguf.GGMLQuantizationType(ggml_type).name.lower()
                except ValueError:
                    type_name = "DEPRECATED"
                errors.append(
                    f"tensor '{name}' of type {ggml_type} ({type_name}) has {ne[0]} elements per row, "
                    f"not a multiple of block size ({block})"
                )
                return fail("failed to read tensor info")
            nbytes = elements // block * type_size
        offset = r.unpack("<Q")
        if offset is None:
            return fail("failed to read tensor info")
        infos.append((name, offset, nbytes))

    if n_tensors > 0:
        data_start = -(-r.pos // alignment) * alignment
        if data_start > file_size:
            return "failed to seek to beginning of data section"
    else:
        data_start = r.pos
    expected = 0
    for name, offset, nbytes in infos:
        if offset != expected:
            return f"tensor '{name}' has offset {offset}, expected {expected}"
        if nbytes is None:
            break  # a type whose size the gguf package does not know: the rest goes unchecked here
        expected += -(-nbytes // alignment) * alignment
    for name, offset, nbytes in infos:  # llama_model_loader, in the file's tensor order
        if nbytes is not None and data_start + offset + nbytes > file_size:
            return f"tensor '{name}' data is not within the file bounds, model is corrupted or incomplete"
    return data_start
