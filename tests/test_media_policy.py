"""The media policies (server/media/): every committed --media-path escape and SSRF target is refused, each a
test of its own, and the references that belong are served."""

from __future__ import annotations

import http.server
import os
import socket
import struct
import threading

import httpx
import pytest

from server.media import audio, paths, urls

# ---- --media-path ------------------------------------------------------------------------------------------

PATH_ESCAPES = [
    "file://../secret.txt",  # traversal (upstream's ".." rule)
    "file://sub/../../secret.txt",
    "file://..",
    "file://%2e%2e/secret.txt",  # percent-encoded traversal: never decoded, refused outright
    "file://%2E%2E%2Fsecret.txt",
    "file://sub%2f..%2fsecret.txt",
    "file://cat.png%00.txt",
    "file://sub\\..\\secret.txt",
    "file://C:secret.txt",  # upstream's forbidden characters
    "file://a|b",
    "file://\x01cat.png",  # control characters
    "file:// cat.png",  # a leading space, a trailing space or dot
    "file://cat.png.",
    "file://cat\uff0e\uff0epng",  # look-alike separators
    "file://sub\u2215cat.png",
    "file://" + "a" * 256,  # over 255 bytes
    "file:///etc/passwd",  # an absolute path outside the root
    "file://link-out/secret.txt",  # a symlink that leaves the root
    "file://link-file",
]


@pytest.fixture()
def media_root(tmp_path):
    root = tmp_path / "media"
    (root / "sub").mkdir(parents=True)
    (root / "cat.png").write_bytes(b"\x89PNG cat")
    (root / "sub" / "dog.png").write_bytes(b"\x89PNG dog")
    (tmp_path / "secret.txt").write_text("secret")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    os.symlink(outside, root / "link-out")
    os.symlink(tmp_path / "secret.txt", root / "link-file")
    os.symlink(root / "sub", root / "link-in")
    os.mkfifo(root / "pipe")
    return root


@pytest.mark.parametrize("url", PATH_ESCAPES)
def test_a_media_path_escape_is_refused(media_root, url):
    with pytest.raises(paths.MediaPathRefused):
        paths.read(str(media_root), url, 1 << 20)


def test_without_media_path_file_urls_are_refused_in_upstreams_words():
    with pytest.raises(paths.MediaPathRefused, match="^file:// URLs are not allowed unless --media-path is specified$"):
        paths.resolve("", "file://cat.png")


def test_upstreams_validation_sentence_names_the_path(media_root):
    with pytest.raises(paths.MediaPathRefused, match=r"^file path is not allowed: \.\./secret\.txt$"):
        paths.resolve(str(media_root), "file://../secret.txt")


@pytest.mark.parametrize("url", ["file://cat.png", "file:///cat.png", "file://sub/dog.png", "file://link-in/dog.png"])
def test_files_inside_the_root_are_read(media_root, url):
    assert paths.read(str(media_root), url, 1 << 20).startswith(b"\x89PNG")


def test_the_absolute_spelling_of_a_file_inside_the_root_is_read(media_root):
    assert paths.read(str(media_root), f"file://{media_root}/cat.png", 1 << 20) == b"\x89PNG cat"


def test_a_fifo_or_directory_is_not_a_file_and_never_blocks(media_root):
    for url in ("file://pipe", "file://sub"):
        with pytest.raises(paths.MediaPathRefused, match="not a regular file"):
            paths.read(str(media_root), url, 1 << 20)


def test_a_missing_file_names_where_paths_resolve(media_root):
    with pytest.raises(paths.MediaPathRefused, match="file does not exist or cannot be opened: nope.png"):
        paths.read(str(media_root), "file://nope.png", 1 << 20)


def test_a_file_over_the_byte_limit_is_refused(media_root):
    with pytest.raises(paths.MediaPathRefused, match="larger than 4 bytes"):
        paths.read(str(media_root), "file://cat.png", 4)


# ---- remote media URLs ---------------------------------------------------------------------------------------

SSRF_TARGETS = [
    "http://127.0.0.1/",
    "http://127.1.2.3:8080/x",
    "http://[::1]/",
    "http://0.0.0.0/",
    "http://[::]/",
    "http://169.254.169.254/latest/meta-data/",  # the cloud metadata service
    "http://169.254.1.1/",
    "http://[fe80::1]/",  # link-local
    "http://10.0.0.5/",
    "http://172.16.3.4/",
    "http://192.168.1.1/",
    "http://100.64.0.1/",  # private, CGNAT
    "http://[fd00::1]/",  # unique-local
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a00:1]/",  # IPv4-mapped
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://224.0.0.1/",
    "http://255.255.255.255/",
    "http://240.0.0.1/",
    "http://198.18.0.1/",
    "http://192.0.2.1/",
    "http://[2001:db8::1]/",
    "http://2130706433/",  # 127.0.0.1 as one decimal number (a name to urlsplit, resolved by the stub)
    "ftp://93.184.216.34/x.png",
    "file:///etc/passwd",
    "http://user:pw@93.184.216.34/x.png",
]

# a local resolver stub: names and the addresses it answers with
STUB_DNS = {
    "metadata.test": ["169.254.169.254"],
    "loopback.test": ["127.0.0.1"],
    "mapped.test": ["::ffff:10.0.0.1"],
    "mixed.test": ["93.184.216.34", "10.1.2.3"],
    "public.test": ["93.184.216.34"],
    "2130706433": ["127.0.0.1"],
}


def stub_resolve(host, port, type=0):
    if host not in STUB_DNS:
        raise socket.gaierror("unknown name")
    return [
        (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in STUB_DNS[host]
    ]


@pytest.mark.parametrize("url", SSRF_TARGETS)
def test_an_ssrf_target_is_refused_before_the_request(url):
    with pytest.raises(urls.MediaURLRefused):
        urls.check_url(url, stub_resolve)


@pytest.mark.parametrize("host", ["metadata.test", "loopback.test", "mapped.test", "mixed.test"])
def test_a_name_resolving_to_a_refused_address_is_refused(host):
    with pytest.raises(urls.MediaURLRefused, match="not public"):
        urls.check_url(f"http://{host}/cat.png", stub_resolve)


def test_a_public_address_passes():
    urls.check_url("https://public.test/cat.png", stub_resolve)
    urls.check_url("http://93.184.216.34/cat.png", stub_resolve)


def _redirecting_to(target: str) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "public.test" and request.url.path == "/cat.png":
            return httpx.Response(302, headers={"location": target})
        if request.url.host == "public.test" and request.url.path == "/hop":
            return httpx.Response(302, headers={"location": "/hop"})
        return httpx.Response(200, content=b"PRIVATE")

    return httpx.MockTransport(handler)


@pytest.mark.parametrize(
    "target",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://127.0.0.1:9/",
        "http://[::ffff:192.168.0.1]/",
        "http://loopback.test/x",
    ],
)
def test_a_redirect_to_a_refused_address_is_refused_before_it_is_followed(target):
    with pytest.raises(urls.MediaURLRefused):
        urls.fetch("http://public.test/cat.png", stub_resolve, _redirecting_to(target), peer_check=lambda r: None)


def test_a_redirect_chain_is_bounded():
    with pytest.raises(urls.MediaURLRefused, match="redirected more than 5 times"):
        urls.fetch("http://public.test/hop", stub_resolve, _redirecting_to("/hop"), peer_check=lambda r: None)


@pytest.fixture()
def local_server():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "7")
            self.end_headers()
            self.wfile.write(b"PRIVATE")

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_dns_rebinding_is_caught_at_the_connected_peer(local_server, monkeypatch):
    # the check resolves public.test to a public address; the connection's own lookup then answers loopback
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kw):
        return real("127.0.0.1", port, *args, **kw) if host == "public.test" else real(host, port, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with pytest.raises(urls.MediaURLRefused, match="the connection reached the address 127.0.0.1"):
        urls.fetch(f"http://public.test:{local_server}/cat.png", stub_resolve)


def test_the_operator_can_allow_private_media_urls(local_server, monkeypatch):
    monkeypatch.setenv(urls.ALLOW_PRIVATE_ENV, "1")
    assert urls.fetch(f"http://127.0.0.1:{local_server}/cat.png") == b"PRIVATE"


# ---- audio clips -----------------------------------------------------------------------------------------------


def _wav(rate=16000, channels=1, n_bytes=3200, declared=None) -> bytes:
    fmt = struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * 2 * channels, 2 * channels, 16)
    data_len = n_bytes if declared is None else declared
    return (
        b"RIFF"
        + struct.pack("<I", 36 + n_bytes)
        + b"WAVEfmt "
        + fmt
        + b"data"
        + struct.pack("<I", data_len)
        + bytes(n_bytes)
    )


def _flac(rate=44100, channels=2, samples=44100, tail=b"", last=True) -> bytes:
    bits = rate << 44 | (channels - 1) << 41 | 15 << 36 | samples
    info = bytes(10) + bits.to_bytes(8, "big") + bytes(16)
    return b"fLaC" + bytes([0x80 if last else 0]) + (34).to_bytes(3, "big") + info + tail


def test_containers_are_told_by_their_magic_bytes_not_a_name():
    assert audio.sniff(_wav()) == "wav"
    assert audio.sniff(_flac()) == "flac"
    assert audio.sniff(b"ID3\x04\x00\x00\x00\x00\x00\x00" + b"\xff\xfb\x90\x64") == "mp3"
    assert audio.sniff(b"\xff\xfb\x90\x64" + bytes(100)) == "mp3"
    assert audio.sniff(b"OggS" + bytes(60)) is None
    with pytest.raises(audio.ClipRefused, match="unsupported audio container"):
        audio.geometry(b"OggS" + bytes(60))


def test_header_geometry_is_read_and_bounded():
    g = audio.geometry(_wav(16000, 1, 32000))
    assert (g.container, g.rate, g.channels, g.seconds) == ("wav", 16000, 1, 1.0)
    assert audio.geometry(_flac()).seconds == 1.0
    mp3 = audio.geometry(b"\xff\xfb\x90\x64" + bytes(100))
    assert (mp3.rate, mp3.channels) == (44100, 2)
    for clip, why in (
        (_wav(rate=384000), "sample rate"),
        (_wav(channels=9), "channels"),
        (_flac(samples=44100 * 601), "more than 600 s"),
    ):
        with pytest.raises(audio.ClipRefused, match=why):
            audio.geometry(clip)


def test_an_amplifying_wav_header_costs_a_header_parse():
    g = audio.geometry(_wav(n_bytes=320, declared=2**32 - 1))  # declares hours, carries 10 ms
    assert g.seconds == pytest.approx(0.01)


def test_a_flac_metadata_chain_is_walked_before_it_is_used():
    with pytest.raises(audio.ClipRefused, match="runs past the end"):
        audio.geometry(_flac(last=False, tail=b"\x81\xff\xff\xff" + os.urandom(64)))
    with pytest.raises(audio.ClipRefused, match="truncated FLAC metadata"):
        audio.geometry(_flac(last=False))
    with pytest.raises(audio.ClipRefused, match="STREAMINFO"):
        audio.geometry(b"fLaC\x84\x00\x00\x04abcd")


def test_the_form_bounds():
    audio.check_form([("file", b"x")] * 32)
    with pytest.raises(audio.ClipRefused, match="too many form parts"):
        audio.check_form([("file", b"x")] * 33)
    with pytest.raises(audio.ClipRefused, match="exceeds"):
        audio.check_form([("file", bytes(audio.MAX_PART_BYTES + 1))])
