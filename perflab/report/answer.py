"""What a question of the seeds gets in a report: a few sentences from this run's numbers, then its
tables and figures. Every experiment that answers a question returns one; `perflab.report.questions`
lays them out in the seeds' order (the PDF and REPORT.md alike)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd


@dataclass
class Answer:
    text: str  # a few sentences with this run's numbers (units on every rate and time, errors in %)
    tables: list[tuple[pd.DataFrame, str]] = field(default_factory=list)  # (table, its caption: one sentence)
    figures: list[Path] = field(default_factory=list)  # PNGs written by perflab.report.plots.save (caption beside)
    sources: list[str] = field(default_factory=list)  # the result files the numbers come from


@dataclass
class Missing:
    """What this run cannot answer, and the command that would (no GPU here, one GPU, a notebook not run)."""
    why: str
    command: str
