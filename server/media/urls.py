"""Remote media URLs: the SSRF policy a fetch proxy needs, which b10621's common_remote_get_content lacks.

A request that names an http(s) image, audio or video URL makes the server fetch it, so an unauthenticated
caller steers where the server connects. Non-public addresses are refused in three places: before the
request (the scheme, no credentials, an IP literal checked, a name resolved and every address checked), on
every redirect (at most five hops, each URL checked before it is followed), and after the connection (the
peer the socket actually reached, checked before a body byte is read: a name that resolves public for the
check and private for the connection is caught there). MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1 turns the address
checks off for a deployment that serves media from its own network. b10621's bounds are kept: 10 MiB and
10 seconds per fetch, and its sentence for a failed download.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from urllib.parse import urljoin, urlsplit

ALLOW_PRIVATE_ENV = "MLXCEL_ALLOW_PRIVATE_MEDIA_URLS"
MAX_BYTES = 10 << 20  # b10621's params.max_size
TIMEOUT_S = 10.0  # b10621's params.timeout
MAX_REDIRECTS = 5
FAILED = "Failed to download image"  # b10621's sentence for a fetch that did not answer 2xx

_REFUSED_V4 = [
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "255.255.255.255/32",
    )
]
_REFUSED_V6 = [
    ipaddress.ip_network(n)
    for n in ("::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8", "2001:db8::/32", "64:ff9b::/96", "100::/64")
]


class MediaURLRefused(ValueError):
    """A media URL refused by the policy; the message is the response's (400)."""


def _private_allowed() -> bool:
    return os.environ.get(ALLOW_PRIVATE_ENV, "") not in ("", "0")


def address_refusal(address: str) -> str | None:
    """Why an address is not public (None: it is)."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped
        if embedded is None and ip.packed[:12] == bytes(12) and int(ip) > 1:  # IPv4-compatible ::a.b.c.d
            embedded = ipaddress.IPv4Address(ip.packed[12:])
        if embedded is not None:
            reason = address_refusal(str(embedded))
            return f"{reason} (as IPv6 {ip})" if reason else None
        nets = _REFUSED_V6
    else:
        nets = _REFUSED_V4
    for net in nets:
        if ip in net:
            return f"the address {ip} is not public ({net})"
    return None


def check_url(url: str, resolve=socket.getaddrinfo) -> None:
    """The pre-request check: scheme, credentials, host, and every address the host stands for."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise MediaURLRefused(f"media URL scheme must be http or https: {url}")
    if parts.username is not None or parts.password is not None:
        raise MediaURLRefused("media URL must not carry credentials")
    host = parts.hostname
    if not host:
        raise MediaURLRefused(f"media URL has no host: {url}")
    if _private_allowed():
        return
    try:
        addresses = [str(ipaddress.ip_address(host))]
    except ValueError:
        try:
            addresses = sorted({info[4][0] for info in resolve(host, parts.port or 443, type=socket.SOCK_STREAM)})
        except OSError:
            raise MediaURLRefused(f"media URL host does not resolve: {host}") from None
    for address in addresses:
        reason = address_refusal(address)
        if reason:
            raise MediaURLRefused(f"media URL refused: {host}: {reason}")


def check_peer(response) -> None:
    """After the connection, before the body: the address the socket reached."""
    if _private_allowed():
        return
    stream = response.extensions.get("network_stream")
    peer = stream.get_extra_info("server_addr") if stream is not None else None
    if peer is None:
        raise MediaURLRefused("media URL refused: the connected peer's address is unknown")
    reason = address_refusal(peer[0])
    if reason:
        raise MediaURLRefused(f"media URL refused: the connection reached {reason}")


def fetch(url: str, resolve=socket.getaddrinfo, transport=None, peer_check=check_peer) -> bytes:
    """The body of a media URL under the policy (MediaURLRefused), or b10621's failure (RuntimeError).
    resolve, transport and peer_check are the seams a test puts a resolver stub and a mock network in."""
    import httpx  # deferred: a fetch is rare, every start-up would pay its import (~0.1 s)

    with httpx.Client(timeout=TIMEOUT_S, follow_redirects=False, transport=transport) as client:
        for _ in range(MAX_REDIRECTS + 1):
            check_url(url, resolve)
            with client.stream("GET", url) as response:
                peer_check(response)
                if response.is_redirect:
                    url = urljoin(url, response.headers["location"])
                    continue
                if not 200 <= response.status_code < 300:
                    raise RuntimeError(FAILED)
                body = b""
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_BYTES:
                        raise RuntimeError(FAILED)
                return body
    raise MediaURLRefused(f"media URL redirected more than {MAX_REDIRECTS} times")
