"""Write results.json in Gradescope's schema, always valid and bounded in size.

Only the trusted process writes it, last, after the worker is gone; it goes to a temporary
name first and is renamed into place, so a reader never sees half a file. Every string in it is
cleaned once more as it is written (text.clean): whatever a worker said, the file is valid UTF-8.
"""
import json
import os
import tempfile
from pathlib import Path

from .text import clean_tree

MAX_OUTPUT_CHARS = 8000  # per test; Gradescope cuts fields near 100k, and results stay < 1 MB


def _clip(text, limit=MAX_OUTPUT_CHARS):
    return text if len(text) <= limit else text[: limit - 20] + "\n[... recortado]"


def build(card, *, execution_time, output="", extra_data=None):
    """Gradescope's results.json of a scoring.Scorecard."""
    return {
        "score": round(card.earned, 4),
        "execution_time": round(execution_time, 2),
        "output": _clip(output, 20000),
        "output_format": "text",
        "test_output_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": extra_data or {},
        "tests": [
            {
                "score": t.score,
                "max_score": t.max_score,
                "status": t.status,
                "name": t.name,
                "number": t.number,
                "visibility": t.visibility,
                "output": _clip(t.output),
                "tags": [t.cls, t.prop],
                "extra_data": {"outcome": t.outcome_status,
                               **({"blocked_by": list(t.blocked_by)} if t.blocked_by else {}),
                               **({"diagnosis": t.diagnosis} if t.diagnosis else {})},
            }
            for t in card
        ],
    }


def write(path, data):
    """Write results.json private to its owner (0600, in a folder made 0700 if it is new)."""
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=".results-", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            json.dump(clean_tree(data), handle, ensure_ascii=False, indent=1)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
