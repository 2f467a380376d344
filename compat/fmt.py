"""`python -m compat.fmt`: rewrite every shard canonically (key order, sorted entries, indentation)."""

from __future__ import annotations

import sys

from .schema import MANIFEST_DIR, dumps, load_json, shard_document, shard_files


def main() -> int:
    for path in shard_files(MANIFEST_DIR):
        doc = load_json(path)
        path.write_text(dumps(shard_document(doc["area"], doc["entries"])), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
