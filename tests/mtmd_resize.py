"""b10621's own image resizing, compiled from the reference sdist for tests: mtmd-image.cpp's img_tool::resize and
resize_pillow (with fill and composite) and clip's u8 image, cut out of the sources by brace matching and built
into a small program that reads an RGB image on stdin and writes the resized one. The oracle for
server/media/resample.py, without Pillow and without a served model."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ALGOS = {"bilinear": 0, "bicubic": 1, "lanczos": 2}
PADS = {"none": 0, "ceil": 1, "nearest": 2}

_MAIN = r"""
int main(int argc, char ** argv) {
    int w = atoi(argv[1]), h = atoi(argv[2]), tw = atoi(argv[3]), th = atoi(argv[4]);
    resize_algo algo = (resize_algo) atoi(argv[5]);
    pad_style pad = (pad_style) atoi(argv[6]);
    std::array<uint8_t, 3> colour = {(uint8_t) atoi(argv[7]), (uint8_t) atoi(argv[8]), (uint8_t) atoi(argv[9])};
    std::vector<uint8_t> buf((size_t) w * h * 3);
    if (fread(buf.data(), 1, buf.size(), stdin) != buf.size()) return 2;
    clip_image_u8 src, dst;
    src.set_size({w, h}, false);
    src.cpy_buf(buf);
    img_tool::resize(src, dst, {tw, th}, algo, pad, colour);
    const auto & out = dst.get_ro_buf();
    fwrite(out.data(), 1, out.size(), stdout);
    return 0;
}
"""


def _cut(text: str, start: str) -> str:
    """The declaration starting at `start` through its matching closing brace (and a struct's semicolon)."""
    i = text.index(start)
    body = text.index("{", i) if start.startswith(("struct", "enum")) else text.index(") {", i) + 2
    depth, j = 0, body  # (a function's body: its parameters' defaults hold braces too)
    while True:
        c = text[j]
        depth += c == "{"
        depth -= c == "}"
        j += 1
        if depth == 0:
            break
    return text[i:j] + (";" if start.startswith(("struct", "enum")) else "")


def program(source: Path, cache: Path) -> Path:
    mtmd = source / "tools" / "mtmd"
    image = (mtmd / "mtmd-image.cpp").read_text()
    model = (mtmd / "clip-model.h").read_text()
    parts = [
        "#include <array>\n#include <cmath>\n#include <cstdint>\n#include <cstdio>\n#include <cstdlib>\n",
        "#include <stdexcept>\n#include <vector>\n#include <algorithm>\n",
        "#define GGML_ASSERT(x) do { if (!(x)) abort(); } while (0)\n",
        _cut((mtmd / "clip.h").read_text(), "struct clip_image_size {"),
        _cut(model, "enum resize_algo {"),
        _cut(model, "enum pad_style {"),
        _cut((mtmd / "clip-impl.h").read_text(), "struct clip_image_u8 {"),
        "struct img_tool {",
        _cut(image, "static void resize("),
        _cut(image, "static void composite("),
        _cut(image, "static void fill("),
        _cut(image, "static bool resize_pillow("),
        "};",
        _MAIN,
    ]
    return build_program("mtmd-resize", "\n".join(parts), cache, ["-O1", "-std=c++17"])


def build_program(name: str, code: str, cache: Path, flags: list[str], extra: bytes = b"", tail: tuple = ()) -> Path:
    """b10621's code cut out of the sdist, compiled once into the cache (keyed by the code, the flags and `extra`,
    say a header it includes), written aside and moved into place; `tail`: arguments after the source (-I, -l)."""
    key = code.encode() + extra + " ".join([*flags, *tail]).encode()
    exe = cache / f"{name}-{hashlib.sha256(key).hexdigest()[:16]}"
    if not exe.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            src, built = Path(tmp) / f"{name}.cpp", Path(tmp) / exe.name
            src.write_text(code)
            subprocess.run(
                ["c++", *flags, "-o", str(built), str(src), *tail], check=True, capture_output=True, timeout=600
            )
            os.replace(built, exe)
    return exe


def resize(exe: Path, rgb: np.ndarray, size: tuple[int, int], algo: str, pad: str, colour=(0, 0, 0)) -> np.ndarray:
    h, w = rgb.shape[:2]
    args = [str(exe), str(w), str(h), str(size[0]), str(size[1]), str(ALGOS[algo]), str(PADS[pad])]
    out = subprocess.run(
        [*args, *(str(c) for c in colour)], input=np.ascontiguousarray(rgb, np.uint8).tobytes(), capture_output=True
    )
    assert out.returncode == 0, out.stderr
    return np.frombuffer(out.stdout, np.uint8).reshape(size[1], size[0], 3)
