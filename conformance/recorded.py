"""Reference answers for the bespoke conformance tests: live when the binary is present (checked against
the recording, re-recorded with MLXCEL_ORACLE_RECORD=1), recorded otherwise."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from oracle.corpus import TRANSCRIPT_DIR
from oracle.transcripts import RECORD_ENV, TranscriptDrift


def reference_answers(name: str, live: Callable[[], Any] | None) -> Any:
    path: Path = TRANSCRIPT_DIR / f"{name}.json"
    if live is None:
        return json.loads(path.read_text(encoding="utf-8"))
    answers = live()
    if os.environ.get(RECORD_ENV) == "1" or not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(answers, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    elif json.loads(path.read_text(encoding="utf-8")) != answers:
        raise TranscriptDrift(
            f"{name}: the reference binary no longer matches its recording; "
            f"re-record with {RECORD_ENV}=1 after checking why"
        )
    return answers
