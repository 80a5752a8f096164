"""Claims as data: each claim's text, the committed file it reads and the query that gives its number live in
claims.json under the results root; this renders them. No result file, machine or peer is named here, so a
claim moves with its data (issue 67, item 7).

A claim: {"claim": text, "source": a path under the results root, "measured": a template, "values": {name:
query}}. `claim` and `measured` are str.format templates over the values. A query names its `op` (one of OPS)
and may give `filter` (a pandas query on the source's rows), `latest` (keep the rows whose column holds its
newest value, "?" aside), `column` and `format` (a format spec, applied to each end of a range). A claim
whose source is missing is left out.

The generated pages' sections are data too: campaigns.json under the results root lists the sections of
CAMPAIGNS.md and of the results root's README.md in order, and gives each the committed files it reads, the labels
it looks up and its claims (perflab.report.markdown draws them)."""
from __future__ import annotations

import json
from pathlib import Path

from perflab.results import RESULTS_ROOT

CLAIMS_FILE = "claims.json"
CAMPAIGNS_FILE = "campaigns.json"


def span(values, spec: str) -> str:
    """'a to b' for a range of values, 'a' when they are all one."""
    lo, hi = format(values.min(), spec), format(values.max(), spec)
    return lo if lo == hi else f"{lo} to {hi}"


def _jsonl(path: Path):
    import pandas as pd
    return pd.DataFrame([json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")])


def _checks(path: Path):
    from perflab.report import predictions
    return predictions.check_points(predictions.committed_checks(path))


def _usc(path: Path):
    import pandas as pd

    from perflab.workbook import usc
    return usc.with_speedup(pd.read_csv(path))


def _csv(path: Path):
    import pandas as pd
    return pd.read_csv(path)


LOADERS = {"csv": _csv, "jsonl": _jsonl, "checks": _checks, "usc": _usc}


def _ratio(t, q):
    """The `mine` peer's epoch over the fastest of `against` at each (H, B): a range."""
    wide = t.pivot_table(index=["H", "B"], columns="peer", values="epoch_ms")
    missing = [p for p in [q["mine"], *q["against"]] if p not in wide]
    if missing:
        raise ValueError(f"{CLAIMS_FILE}: no peer {missing} in the source; it has {sorted(wide.columns)}")
    return span(wide[q["mine"]] / wide[list(q["against"])].min(axis=1), q["format"])


def _efficiency(t, q):
    """Efficiency t(1) / (p t(p)) of a peer family's fastest epoch at one net (perflab: its fastest exchange)."""
    from perflab.analysis.perfmodel import is_net
    rows = t[is_net(t.H, q["net"])].copy()
    rows["family"] = [q["family"] if peer.startswith(q["family"]) else peer for peer in rows.peer]
    best = rows.groupby(["family", "p"]).epoch_ms.min().unstack()
    return format(best[1][q["family"]] / (q["p"] * best[q["p"]][q["family"]]), q["format"])


def _span(t, q):
    values = t[q["column"]]
    if "group" in q:
        values = t.groupby(q["group"])[q["column"]].agg(q.get("group_agg", "max"))
    return span(values, q["format"])


def _option(t, q):
    """The values a command-line option took in a column of argument lists, joined."""
    return ", ".join(sorted({args[args.index(q["option"]) + 1] for args in t[q["column"]]}))


OPS = {
    "ratio": _ratio,
    "efficiency": _efficiency,
    "span": _span,
    "option": _option,
    "listing": lambda t, q: ", ".join(f"{k} {format(v, q['format'])}{q.get('unit', '')}"
                                      for k, v in t.set_index(q["key"])[q["column"]].items()),
    "count": lambda t, q: format(len(t), q.get("format", "d")),
    "sum": lambda t, q: format(t[q["column"]].astype(int).sum(), q.get("format", "d")),
    "mean": lambda t, q: format(t[q["column"]].astype(float).mean(), q["format"]),
    "median_abs": lambda t, q: format(t[q["column"]].abs().median(), q["format"]),
}


def _rows(t, q):
    """The source's rows a query reads: its filter, then its newest value of `latest`."""
    if "filter" in q:
        t = t.query(q["filter"], engine="python")
    if "latest" in q:
        dated = t[q["latest"]][t[q["latest"]] != "?"]
        t = t[t[q["latest"]] == dated.max()]
    return t


def value(table, query: dict) -> str:
    """One query's answer, formatted."""
    if query["op"] not in OPS:
        raise ValueError(f"{CLAIMS_FILE}: op {query['op']!r} is not one of {sorted(OPS)}")
    return OPS[query["op"]](_rows(table, query), query)


def _read(root: Path | None = None) -> dict:
    path = (root or RESULTS_ROOT) / CLAIMS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def load(section: str, root: Path | None = None) -> list[dict]:
    """The claims of one section of the results root's claims file (none where it has no such file)."""
    return _read(root).get(section, [])


def setting(key: str, root: Path | None = None) -> str:
    """A setting of the claims file (the run REPORT.md answers from)."""
    settings = _read(root)
    if key not in settings:
        raise KeyError(f"{(root or RESULTS_ROOT) / CLAIMS_FILE} has no {key!r}")
    return settings[key]


def _values(c: dict, path: Path) -> dict:
    """A claim's values, each query answered from its source (`path`)."""
    if not c.get("values"):
        return {}
    table = LOADERS[c.get("load", path.suffix.lstrip("."))](path)
    return {name: value(table, q) for name, q in c["values"].items()}


def render(claims: list[dict], root: Path | None = None) -> list[dict]:
    """Each claim whose source exists as a row {claim, measured, source}, its numbers read from the source."""
    root = root or RESULTS_ROOT
    rows = []
    for c in claims:
        path = root / c["source"]
        if path.exists():
            values = _values(c, path)
            rows.append({"claim": c["claim"].format(**values), "measured": c["measured"].format(**values),
                         "source": f"`{path.relative_to(root.parent)}`"})
    return rows


def note(name: str, root: Path | None = None) -> str | None:
    """A fixed note of the campaigns' page, its numbers read from its source; None where the source is missing."""
    root = root or RESULTS_ROOT
    c = _read(root)["campaigns"][name]
    if "source" not in c:
        return c["claim"]
    path = root / c["source"]
    if not path.exists():
        return None
    return c["claim"].format(source=path.relative_to(root.parent), **_values(c, path))


def _campaigns(root: Path | None = None) -> dict:
    path = (root or RESULTS_ROOT) / CAMPAIGNS_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def page(name: str, root: Path | None = None) -> list[str]:
    """The sections of a generated page, in order: `campaigns` (CAMPAIGNS.md) or `readme` (the tables of the
    results root's README.md); none where the results root has no campaigns file."""
    return _campaigns(root).get(name, [])


def section(name: str, root: Path | None = None) -> dict:
    """One section's entry of the campaigns file: the result files it reads, the labels it looks up, its claims."""
    sections = _campaigns(root).get("sections", {})
    if name not in sections:
        raise KeyError(f"{(root or RESULTS_ROOT) / CAMPAIGNS_FILE} has no section {name!r}")
    return sections[name]
