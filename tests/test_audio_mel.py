"""server/media/mel.py against b10621's own whisper preprocessor (mtmd-audio.cpp's mtmd_audio_preprocessor_whisper,
compiled from the reference sdist by tests/mtmd_mel.py): the same chunks, bit for bit, for 80 and 128 mel bins, on
noise of several lengths (under 30 s, exactly 30 s, just over, several chunks), silence, a full-scale sine, audio
shorter than half a window, and audio whose last samples fall in the frames dropped with the partial chunk."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import require
from server.media import mel

pytestmark = pytest.mark.reference  # (the sdist's sources)

SR = 16000


@pytest.fixture(scope="module")
def mtmd(tmp_path_factory):
    import shutil

    require(shutil.which("c++") is not None, "no C++ compiler to build b10621's preprocessor")
    from oracle.reference import source_tree
    from tests import mtmd_mel

    try:
        tree = source_tree()
    except Exception as exc:  # (offline, without the cached sdist)
        require(False, f"the b10621 sources are unavailable: {exc}")
    return mtmd_mel.program(tree, tmp_path_factory.mktemp("mtmd"))


def _noise(seconds: float, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, round(seconds * SR)).astype(np.float32)


def _tail_in_dropped_frames() -> np.ndarray:
    """479830 samples: 5999 frames, so one chunk and the rest dropped; frame 3000 (dropped) still covers the
    audio's last 30 samples, which are loud (the normalisation's max runs over every frame)."""
    pcm = 0.01 * _noise(479830 / SR, 7)
    pcm[-30:] = 1.0
    return pcm


CASES = {
    "noise 1 s": lambda: _noise(1.0, 1),
    "noise 7.3 s": lambda: _noise(7.3, 2),
    "noise 30 s": lambda: _noise(30.0, 3),
    "noise 31 s": lambda: _noise(31.0, 4),
    "noise 65 s": lambda: _noise(65.0, 5),
    "silence": lambda: np.zeros(3 * SR, np.float32),
    "loud sine": lambda: np.sin(2 * np.pi * 440.0 * np.arange(2 * SR) / SR).astype(np.float32),
    "5 samples": lambda: _noise(5 / SR, 6),
    "tail in dropped frames": _tail_in_dropped_frames,
}


def _same(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return len(got) == len(want) and all(
        g.shape == w.shape and np.array_equal(g.view(np.uint32), w.view(np.uint32))
        for g, w in zip(got, want, strict=True)
    )


@pytest.mark.parametrize("n_mel", [80, 128])
@pytest.mark.parametrize("case", list(CASES))
def test_log_mel_is_b10621s_bit_for_bit(mtmd, case, n_mel):
    from tests import mtmd_mel

    pcm = CASES[case]()
    want = mtmd_mel.log_mel_chunks(mtmd, pcm, n_mel)
    got = mel.log_mel_chunks(pcm, n_mel)
    assert len(got) == len(want) == mel.n_chunks(pcm.size)
    assert all(c.shape == (n_mel, mel.FRAMES_PER_CHUNK) and c.dtype == np.float32 for c in got)
    if not _same(got, want):
        diff = [np.argwhere(g.view(np.uint32) != w.view(np.uint32))[:3] for g, w in zip(got, want, strict=False)]
        pytest.fail(f"{case}, n_mel {n_mel}: first differences per chunk (mel, frame): {diff}")


def test_chunk_count_follows_the_30_s_padding():
    """(n + 480000) // 160 + 1 frames, every full 3000 a chunk: 30 s of audio already makes two."""
    assert [mel.n_chunks(n) for n in (0, 1, 16000, 479839, 479840, 480000, 959840, 1040000)] == [0, 1, 1, 1, 2, 2, 3, 3]


def test_thread_count_changes_nothing():
    pcm = _noise(4.0, 8)
    one = mel.log_mel_chunks(pcm, 80, n_threads=1)
    assert _same(mel.log_mel_chunks(pcm, 80, n_threads=7), one)


def test_empty_audio_is_refused():
    with pytest.raises(ValueError):
        mel.log_mel_chunks(np.zeros(0, np.float32), 128)
