"""server/api/media_input.py: b10621's handle_media sentences and its lenient base64, and mtmd_tokenize's layout
of a prompt with images (BOS first, each text piece tokenized alone, an image's positions holding its id)."""

from __future__ import annotations

import base64

import pytest

from server.api import media_input
from server.engine.types import placeholder_id
from server.errors import ErrorKind, UpstreamError

MARK = "<__media_test__>"


def test_base64_is_read_as_b10621_reads_it():
    data = bytes(range(256))
    text = base64.b64encode(data).decode()
    assert media_input.base64_decode(text) == data
    assert media_input.base64_decode(text.rstrip("=")) == data  # a last partial group gives its bytes
    assert media_input.base64_decode("aGVsbG8=!ignored") == b"hello"  # it stops at the first '='
    assert media_input.base64_decode("aGVs bG8=") == b"hel"  # ... or at the first character outside the alphabet
    assert media_input.base64_decode("a") == b""


@pytest.mark.parametrize(
    ("url", "message", "kind"),
    [
        ("data:image/png;base64", "Invalid uri-encoded base64 value", ErrorKind.SERVER),
        ("data:text/plain;base64,aGk=", "Invalid uri format: data:text/plain;base64", ErrorKind.SERVER),
        ("data:image/png,aGk=", "uri must be base64 encoded", ErrorKind.SERVER),
        ("%%%", "Invalid base64 value", ErrorKind.SERVER),
        ("file://x.png", "file:// URLs are not allowed unless --media-path is specified", ErrorKind.INVALID_REQUEST),
    ],
)
def test_bad_urls_get_b10621s_sentences(url, message, kind):
    with pytest.raises(UpstreamError) as e:
        media_input.read_media(media_input.MediaRef(url), "")
    assert (str(e.value), e.value.kind) == (message, kind)


def test_data_uri_and_bare_base64_give_the_files_bytes():
    uri = "data:image/png;base64," + base64.b64encode(b"\x89PNG...").decode()
    assert media_input.read_media(media_input.MediaRef(uri), "") == b"\x89PNG..."
    assert media_input.read_media(media_input.MediaRef(base64.b64encode(b"raw").decode()), "") == b"raw"


def test_unreadable_bytes_are_b10621s_failed_load():
    with pytest.raises(UpstreamError) as e:
        media_input.decode_image(b"not an image")
    assert (str(e.value), e.value.kind) == (media_input.FAILED_LOAD, ErrorKind.INVALID_REQUEST)


class _Tok:
    add_bos, add_eos, bos_id, eos_id = True, False, 1, 2

    def tokenize(self, text, add_special, parse_special):
        assert (add_special, parse_special) == (False, True)
        return [100 + len(w) for w in text.split()]


class _Encoder:
    def __init__(self, begin: str = "", end: str = "", non_causal: bool = False):
        self.n_tokens, self.begin, self.end, self.non_causal = 4, begin, end, non_causal


def test_the_prompt_is_laid_out_as_mtmd_tokenize_does():
    from fixtures.llava_twin import png

    a, b = png(seed=1), png(seed=2)
    prompt = f"say {MARK}then {MARK}{MARK} end"
    ids = media_input.media_prompt(_Tok(), prompt, [a, b, a], MARK, _Encoder())
    spans = [(m.start, m.end) for m in ids.media]
    assert spans == [(2, 6), (7, 11), (11, 15)]
    assert ids[:2] == [1, 103] and ids[6] == 104 and ids[15:] == [103]
    assert ids[2:6] == [placeholder_id(ids.media[0].chunk_id)] * 4
    assert ids[2] == ids[11] != ids[7] < 0  # the same file, the same id; another file, another
    assert ids.media[0].image.shape == (32, 32, 3)


def test_markers_and_files_must_pair_up():
    from fixtures.llava_twin import png

    with pytest.raises(UpstreamError) as e:
        media_input.media_prompt(_Tok(), f"one {MARK} two {MARK}", [png()], MARK, _Encoder())
    assert str(e.value) == media_input.FAILED_TOKENIZE


def test_an_images_begin_and_end_text_wrap_its_span():
    """Gemma 3: `<start_of_image>` and `<end_of_image>` tokenized on their own around the span, which decodes
    non-causally."""
    from fixtures.llava_twin import png

    ids = media_input.media_prompt(_Tok(), f"a {MARK}b", [png()], MARK, _Encoder("<s_img>", "<e_img> x", True))
    (chunk,) = ids.media
    assert ids[:3] == [1, 101, 107] and (chunk.start, chunk.end) == (3, 7) and ids[7:] == [107, 101, 101]
    assert chunk.non_causal
