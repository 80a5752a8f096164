"""Markdown tables from result files, shared by the results root's README.md, REPORT.md and the predictor's
evidence."""
from __future__ import annotations

from pathlib import Path

from perflab.results import RESULTS_ROOT


def fmt(table) -> str:
    """A pandas table as GitHub markdown (no extra dependency)."""
    cols = list(table.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row) + " |")
    return "\n".join(lines)


def source(path: Path, meta: dict | None = None) -> str:
    """The file, its machine, commit and date: from the JSON beside it, or `meta` (a JSON-lines file's own)."""
    import json
    if meta is None:
        meta = json.loads(path.with_suffix(".json").read_text()) if path.with_suffix(".json").exists() else {}
    what = meta.get("gpu") or meta.get("cpu", "?")
    return f"`{path.relative_to(RESULTS_ROOT.parent)}` ({what}, git {str(meta.get('git_commit', '?'))[:8]}, {meta.get('date', '?')})"
