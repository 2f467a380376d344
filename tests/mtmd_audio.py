"""b10621's own audio decoding, compiled from the reference sdist for tests: mtmd-helper.cpp's miniaudio
configuration (its #defines, cut from the source) and audio_helpers::decode_audio_from_buf (cut out by brace
matching), with the sdist's vendor/miniaudio/miniaudio.h, built as b10621's Release build builds mtmd-helper.cpp
(C++17, -O3 -DNDEBUG) into a small program that reads a file's bytes on stdin and writes the mono float32
samples, or exits 1 where decode_audio_from_buf returns false. The oracle for server/media/miniaudio.py, without a
served audio model. Built once into the cache (keyed by the code's, the header's and the flags' hash)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from tests.mtmd_resize import _cut, build_program

_FLAGS = ("-O3", "-DNDEBUG", "-std=gnu++17")  # CMAKE_BUILD_TYPE=Release, cxx_std_17 (extensions on)

_MAIN = r"""
int main(int argc, char ** argv) {
    if (argc != 2) return 2;
    const int rate = atoi(argv[1]);
    std::vector<unsigned char> buf;
    unsigned char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), stdin)) > 0) buf.insert(buf.end(), chunk, chunk + n);
    std::vector<float> pcm;
    if (!audio_helpers::decode_audio_from_buf(buf.data(), buf.size(), rate, pcm)) return 1;
    fwrite(pcm.data(), sizeof(float), pcm.size(), stdout);
    return 0;
}
"""


def _defines(helper: str) -> str:
    """mtmd-helper.cpp's miniaudio block: MINIAUDIO_IMPLEMENTATION through the #include, as b10621 has it."""
    start = helper.index("#define MINIAUDIO_IMPLEMENTATION")
    end = helper.index('#include "miniaudio/miniaudio.h"', start)
    return helper[start:end] + '#include "miniaudio/miniaudio.h"\n'


def program(source: Path, cache: Path) -> Path:
    helper = (source / "tools" / "mtmd" / "mtmd-helper.cpp").read_text()
    header = source / "vendor" / "miniaudio" / "miniaudio.h"
    parts = [
        "#include <cstdio>\n#include <cstdlib>\n#include <cstring>\n#include <vector>\n",
        _defines(helper),
        "namespace audio_helpers {",
        _cut(helper, "static bool decode_audio_from_buf("),
        "}",
        _MAIN,
    ]
    tail = ("-I", str(source / "vendor"), "-lm", "-lpthread")
    return build_program("mtmd-audio", "\n".join(parts), cache, list(_FLAGS), header.read_bytes(), tail)


def decode(exe: Path, data: bytes, rate: int) -> np.ndarray | None:
    """b10621's samples, or None where decode_audio_from_buf returns false."""
    out = subprocess.run([str(exe), str(rate)], input=data, capture_output=True, timeout=120)
    if out.returncode == 1:
        return None
    assert out.returncode == 0, out.stderr
    return np.frombuffer(out.stdout, np.float32)
