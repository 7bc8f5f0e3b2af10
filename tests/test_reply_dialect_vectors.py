"""tests/vectors/reply_dialects.json is what the server's writers and the Python readers give today.

The JS readers (tests/web/reply_dialects.test.js) are checked against that file; this keeps it true: a change
to a writer or a Python reader that changes the streams or what is read fails here until the file is made anew
(``.venv/bin/python tests/vectors/reply_dialects.py``).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).parent / "vectors" / "reply_dialects.py"


def test_the_vector_file_is_what_the_writers_and_readers_give_now() -> None:
    spec = importlib.util.spec_from_file_location("reply_dialects_vectors", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stored = json.loads(SCRIPT.with_suffix(".json").read_text(encoding="utf-8"))
    assert stored == {"cases": module.cases()}
    kinds = {(c["dialect"], c["read"]["finish_reason"] or "error") for c in stored["cases"]}
    assert kinds == {
        (d, r) for d in ("responses", "messages") for r in ("stop", "length", "tool_calls", "error")
    }
