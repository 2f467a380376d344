"""server/media/resample.py against b10621's own resizing code (mtmd-image.cpp's resize_pillow and
img_tool::resize, compiled from the reference sdist by tests/mtmd_resize.py): byte-identical images for each
filter, downscaling, upscaling, one axis only, odd sizes, and the padded square canvas LLaVA's preprocessor
makes."""

from __future__ import annotations

import numpy as np
import pytest

from server.media import resample

pytestmark = pytest.mark.reference  # (the sdist's sources)

SIZES = [(40, 24), (17, 53), (7, 5), (640, 488), (33, 32), (32, 100)]


@pytest.fixture(scope="module")
def mtmd(tmp_path_factory):
    from oracle.reference import source_tree
    from tests import mtmd_resize

    return mtmd_resize.program(source_tree(), tmp_path_factory.mktemp("mtmd"))


def _image(w: int, h: int) -> np.ndarray:
    return np.random.default_rng(w * 1000 + h).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize("algo", ["bilinear", "bicubic", "lanczos"])
@pytest.mark.parametrize("size", SIZES)
def test_resize_is_b10621s_byte_for_byte(mtmd, algo, size):
    from tests import mtmd_resize

    img = _image(*size)
    for target in [(32, 32), (13, 29), (size[0] * 2, size[1]), (size[0], size[1] // 2 + 1)]:
        want = mtmd_resize.resize(mtmd, img, target, algo, "none")
        got = resample.resize(img, target[0], target[1], resample.Resize[algo.upper()])
        assert got.shape == want.shape and np.array_equal(got, want), (target, np.argwhere(got != want)[:3])


@pytest.mark.parametrize("size", [*SIZES, (32, 32), (64, 64)])
def test_padded_square_is_b10621s(mtmd, size):
    """LLaVA's fixed-size preprocessing: aspect kept, sides rounded up, centred on (122, 116, 104)."""
    from tests import mtmd_resize

    img = _image(*size)
    pad = (122, 116, 104)
    want = mtmd_resize.resize(mtmd, img, (32, 32), "bicubic", "ceil", pad)
    got = resample.resize_padded(img, 32, resample.Resize.BICUBIC, pad)
    assert np.array_equal(got, want)
    if max(size) >= 1.1 * min(size):  # (the canvas shows: a check that cannot pass on an unpadded resize)
        assert (got == np.array(pad, np.uint8)).all(axis=2).any()
