"""b10621's own whisper audio preprocessor, compiled from the reference sdist for tests: mtmd-audio.cpp's tables
(sin/cos, Hann, mel filter bank), its FFT, log_mel_spectrogram and mtmd_audio_preprocessor_whisper, cut out of
the sources by brace matching (tests/mtmd_resize.py's way) and built into a small program that reads float32 PCM
on stdin and writes the mel chunks. The oracle for server/media/mel.py, without a served audio model.

Built as b10621's release build compiles it: -O3, and no FMA contraction (its x86-64 build has no FMA
instructions; -ffp-contract=off keeps that true on any host)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np

from tests.mtmd_resize import _cut, build_program

_PRELUDE = r"""
#define _USE_MATH_DEFINES
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>
#define GGML_ASSERT(x) do { if (!(x)) abort(); } while (0)
#define LOG_ERR(...) fprintf(stderr, __VA_ARGS__)
constexpr bool DEBUG = false;

struct clip_hparams {  // (the audio fields the whisper preprocessor reads)
    int32_t n_mel_bins, audio_sample_rate, audio_n_fft, audio_window_len, audio_hop_len;
};
"""

_PREPROCESSOR = r"""
struct mtmd_audio_preprocessor_whisper {
    const clip_hparams & hparams;
    mtmd_audio_cache cache;
    mtmd_audio_preprocessor_whisper(const clip_hparams & hp) : hparams(hp) {}
    void initialize();
    bool preprocess(const float * samples, size_t n_samples, std::vector<mtmd_audio_mel> & output);
};
"""

_MAIN = r"""
int main(int argc, char ** argv) {
    if (argc != 6) return 2;
    clip_hparams hp = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5])};
    std::vector<float> pcm;
    float buf[4096];
    size_t n;
    while ((n = fread(buf, sizeof(float), 4096, stdin)) > 0) pcm.insert(pcm.end(), buf, buf + n);
    mtmd_audio_preprocessor_whisper pre(hp);
    pre.initialize();
    std::vector<mtmd_audio_mel> chunks;
    if (!pre.preprocess(pcm.data(), pcm.size(), chunks)) return 3;
    int32_t header[3] = {(int32_t) chunks.size(), 0, 0};
    if (!chunks.empty()) { header[1] = (int32_t) chunks[0].n_mel; header[2] = (int32_t) chunks[0].n_len; }
    fwrite(header, sizeof(int32_t), 3, stdout);
    for (const auto & c : chunks) {
        if (c.n_mel != header[1] || c.n_len != header[2]) return 4;
        fwrite(c.data.data(), sizeof(float), c.data.size(), stdout);
    }
    return 0;
}
"""


def program(source: Path, cache: Path) -> Path:
    mtmd = source / "tools" / "mtmd"
    audio = (mtmd / "mtmd-audio.cpp").read_text()
    header = (mtmd / "mtmd-audio.h").read_text()
    parts = [
        _PRELUDE,
        _cut(header, "struct mtmd_audio_mel {"),
        _cut(header, "struct mtmd_audio_mel_filters {"),
        _cut(header, "struct mtmd_audio_cache {"),
        _cut(audio, "void mtmd_audio_cache::fill_sin_cos_table("),
        _cut(audio, "void mtmd_audio_cache::fill_hann_window("),
        _cut(audio, "void mtmd_audio_cache::fill_mel_filterbank_matrix("),
        "template <bool Inverse, bool RealInput>",
        _cut(audio, "static void dft_impl("),
        "template <bool Inverse, bool RealInput>",
        _cut(audio, "static void fft_impl("),
        _cut(audio, "static void fft("),
        _cut(audio, "struct filter_params {"),
        _cut(audio, "static void log_mel_spectrogram_worker_thread("),
        _cut(audio, "static bool log_mel_spectrogram("),
        _PREPROCESSOR,
        _cut(audio, "void mtmd_audio_preprocessor_whisper::initialize("),
        _cut(audio, "bool mtmd_audio_preprocessor_whisper::preprocess("),
        _MAIN,
    ]
    return build_program("mtmd-mel", "\n".join(parts), cache, ["-O3", "-std=c++17", "-ffp-contract=off", "-pthread"])


def log_mel_chunks(
    exe: Path,
    pcm: np.ndarray,
    n_mel: int,
    sample_rate: int = 16000,
    n_fft: int = 400,
    window: int = 400,
    hop: int = 160,
) -> list[np.ndarray]:
    """b10621's chunks: each (n_mel, n_len) float32, as mtmd_audio_mel.data holds them (mel-major)."""
    args = [str(exe), str(n_mel), str(sample_rate), str(n_fft), str(window), str(hop)]
    data = np.ascontiguousarray(pcm, np.float32).tobytes()
    out = subprocess.run(args, input=data, capture_output=True)
    assert out.returncode == 0, (out.returncode, out.stderr)
    count, mels, frames = np.frombuffer(out.stdout[:12], np.int32)
    values = np.frombuffer(out.stdout[12:], np.float32)
    assert values.size == count * mels * frames
    return list(values.reshape(count, mels, frames))
