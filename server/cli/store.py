"""`mlxcel download REPO`, `mlxcel list`, `mlxcel rm REPO`: the model store (server/models/hub.py).

Options, before or after the command: --models-dir DIR (the store root; mlxcel's own spelling, never a
llama-server one), --offline and --hf-token TOKEN (else $HF_TOKEN)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..models import hub
from ..models.bundled import BUNDLED_ENCODERS, BUNDLED_ENCODERS_BUILT, BUNDLED_MODELS, DEFAULT_MODEL
from ..models.store import cached_models


def _store_options(suppress: bool) -> argparse.ArgumentParser:
    """The store's options, taken before the command and after it (a command's copy leaves the value given
    before it alone unless it is given again)."""
    kw = {"default": argparse.SUPPRESS} if suppress else {}
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--models-dir", help="the store root (default: $MLXCEL_MODELS_DIR, else the cache's models/)", **kw)
    p.add_argument("--offline", action="store_true", help="refuse every download", **kw)
    p.add_argument(
        "-hft",
        "--hf-token",
        metavar="TOKEN",
        **kw,
        help="Hugging Face access token, sent as 'Authorization: Bearer' (default: value from HF_TOKEN "
        "environment variable)",
    )
    return p


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="mlxcel", description="the model store", parents=[_store_options(False)])
    sub = p.add_subparsers(dest="command", required=True)
    common = [_store_options(True)]
    sub.add_parser("download", help="fetch <owner>/<name> from the hub", parents=common).add_argument("repo")
    sub.add_parser("list", help="the bundled models and the store's snapshots", parents=common)
    sub.add_parser("rm", help="remove a snapshot", parents=common).add_argument("repo")
    args = p.parse_args(argv)
    hub.set_store_root(args.models_dir)
    hub.set_offline(args.offline)
    hub.set_token(args.hf_token)
    try:
        if args.command == "download":
            print(hub.download(args.repo, progress_bar=True))
        elif args.command == "list":
            for name, what in listing():
                print(f"{name:32s} {what}")
        elif args.command == "rm":
            if not hub.remove_snapshot(args.repo):
                print(f"mlxcel: '{args.repo}' is not in the store ({hub.store_root()})", file=sys.stderr)
                return 1
    except hub.HubError as exc:
        print(f"mlxcel: error: {exc}", file=sys.stderr)
        return 1
    return 0


def listing() -> list[tuple[str, str]]:
    """(name -m accepts, what it is) for every model the store knows: each bundled model (built or not yet),
    then what --cache-list finds there besides them (downloaded snapshots, other checkpoints)."""
    root = hub.store_root()
    built = {**{name: m.built for name, m in BUNDLED_MODELS.items()}, **BUNDLED_ENCODERS_BUILT}
    rows = []
    for name, is_built in built.items():
        kind = "bundled, the default" if name == DEFAULT_MODEL.name else "bundled"
        rows.append((name, f"{kind}; {'ready' if is_built() else 'fetched and converted on first use'}"))
    bundled = {*BUNDLED_MODELS, *BUNDLED_ENCODERS}
    for name in cached_models(root):
        if name not in bundled and Path(name).name not in bundled:
            rows.append((name, "downloaded" if name in hub.list_snapshots(root) else "checkpoint in the store"))
    return rows


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
