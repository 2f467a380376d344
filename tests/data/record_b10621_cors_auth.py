"""Records b10621's CORS and API-key answers into b10621_cors_auth.json (tests/test_auth_cors.py pins them).

Run by hand against the reference binary (not collected by pytest):
    python tests/data/record_b10621_cors_auth.py LLAMA_SERVER MODEL.gguf
Each configuration starts the binary with --api-key k1 plus the CORS options under test, sends raw HTTP/1.1
requests (so header casing and empty values survive) and keeps the status and every Access-Control-* header.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = {
    "default": [],
    "no-credentials": ["--no-cors-credentials"],
    "localhost": ["--cors-origins", "localhost"],
    "localhost-no-credentials": ["--cors-origins", "localhost", "--no-cors-credentials"],
    "list": [
        "--cors-origins",
        "http://a,http://b",
        "--cors-methods",
        "GET",
        "--cors-headers",
        "Authorization,X-Api-Key",
    ],
}
ORIGINS = [
    None,
    "",
    "http://a.example",
    "http://localhost:3000",
    "https://127.0.0.1",
    "http://[::1]:8080",
    "http://LOCALHOST",
    "localhost",
    "http://user@localhost",
    "http://localhost/@evil",
    "http://localhost:abc",
    "http://localhost:80abc",
    "ftp://localhost",
    "http://localhost:99999999999",
    "http://[::1",
    "http://localhost.evil.example",
    "https://[::1]",
]
REQUESTS = [("GET", "/health"), ("GET", "/props"), ("OPTIONS", "/props"), ("OPTIONS", "/no/such/path")]


def raw(port: int, method: str, path: str, headers: list[str]) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as s:
        head = f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + "".join(h + "\r\n" for h in headers)
        s.sendall(head.encode() + b"\r\n")
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def split(resp: bytes) -> tuple[int, list[list[str]], str]:
    head, _, body = resp.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = [line.split(": ", 1) if ": " in line else [line.rstrip(":"), ""] for line in lines[1:]]
    return int(lines[0].split()[1]), headers, body.decode()


def main(binary: str, model: str) -> None:
    out: dict = {"configs": {}}
    port = 18590
    for name, args in CONFIGS.items():
        port += 1
        proc = subprocess.Popen(
            [binary, "-m", model, "--port", str(port), "-c", "512", "-t", "1", "--no-ui", "--api-key", "k1", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(120):
                try:
                    if split(raw(port, "GET", "/health", []))[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.25)
            cases = []
            for method, path in REQUESTS:
                for origin in ORIGINS:
                    status, headers, _ = split(raw(port, method, path, [] if origin is None else [f"Origin: {origin}"]))
                    cors = [h for h in headers if h[0].lower().startswith("access-control-")]
                    cases.append({"method": method, "path": path, "origin": origin, "status": status, "cors": cors})
            out["configs"][name] = {"args": args, "cases": cases}
            if name == "default":
                for key, (method, path, hdrs) in {
                    "unauthorized": ("GET", "/props", ["Origin: http://a.example"]),
                    "preflight": ("OPTIONS", "/props", ["Origin: http://a.example"]),
                }.items():
                    status, headers, body = split(raw(port, method, path, hdrs))
                    out[key] = {"status": status, "headers": headers, "body": body}
        finally:
            proc.terminate()
            proc.wait()
    Path(__file__).with_name("b10621_cors_auth.json").write_text(render(out))


def render(out: dict) -> str:
    """One case per line, so a re-recording diffs readably."""
    lines = [
        "{",
        f' "unauthorized": {json.dumps(out["unauthorized"])},',
        f' "preflight": {json.dumps(out["preflight"])},',
        ' "configs": {',
    ]
    for i, (name, cfg) in enumerate(out["configs"].items()):
        lines.append(f'  {json.dumps(name)}: {{"args": {json.dumps(cfg["args"])}, "cases": [')
        lines += [f"   {json.dumps(c)}," for c in cfg["cases"]]
        lines[-1] = lines[-1].rstrip(",")
        lines.append("  ]}" + ("," if i < len(out["configs"]) - 1 else ""))
    return "\n".join([*lines, " }", "}"]) + "\n"


if __name__ == "__main__":
    main(*sys.argv[1:3])
