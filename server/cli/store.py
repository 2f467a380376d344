"""`mlxcel download REPO`, `mlxcel list`, `mlxcel rm REPO`: the model store (server/models/hub.py).

Options before the command: --models-dir DIR (the store root; mlxcel's own spelling, never a llama-server one),
--offline and --hf-token TOKEN (else $HF_TOKEN)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    from ..models import hub

    p = argparse.ArgumentParser(prog="mlxcel", description="the model store")
    p.add_argument("--models-dir", help="the store root (default: $MLXCEL_MODELS_DIR, else the cache's models/)")
    p.add_argument("--offline", action="store_true", help="refuse every download")
    p.add_argument("-hft", "--hf-token", default=None, metavar="TOKEN",
                   help="Hugging Face access token (default: value from HF_TOKEN environment variable)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("download", help="fetch <owner>/<name> from the hub").add_argument("repo")
    sub.add_parser("list", help="the store's snapshots")
    sub.add_parser("rm", help="remove a snapshot").add_argument("repo")
    args = p.parse_args(argv)
    hub.set_store_root(args.models_dir)
    hub.set_offline(args.offline)
    hub.set_token(args.hf_token)
    try:
        if args.command == "download":
            print(hub.download(args.repo, progress_bar=True))
        elif args.command == "list":
            for name in hub.list_snapshots():
                print(name)
        elif args.command == "rm":
            if not hub.remove_snapshot(args.repo):
                print(f"mlxcel: '{args.repo}' is not in the store ({hub.store_root()})", file=sys.stderr)
                return 1
    except hub.HubError as exc:
        print(f"mlxcel: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
