from pathlib import Path

import pandas as pd
import pytest

from perflab.data import PROJECT_ROOT
from perflab.report import markdown


def test_readme_results_block_matches_the_result_files():
    """README numbers and results/README.md's tables come from committed files: regenerate and compare
    (perflab report --readme fixes it)."""
    from perflab.results import RESULTS_ROOT
    readme = PROJECT_ROOT / "README.md"
    assert markdown.generated(readme, markdown.HEADLINE_BEGIN, markdown.HEADLINE_END) == "\n" + markdown.headline()
    assert markdown.generated(RESULTS_ROOT / "README.md", markdown.BEGIN, markdown.END) == "\n" + markdown.markdown()


def test_the_readme_is_a_front_door():
    """A newcomer reads it in five minutes: at most 250 lines, a headline of at most 12 claims, each naming a
    committed file that exists; the long tables live in results/README.md."""
    text = (PROJECT_ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    rows = [line for line in markdown.headline().splitlines()[2:] if line.startswith("|")]
    assert 6 <= len(rows) <= 12
    for row in rows:
        source = row.rstrip(" |").rsplit("|", 1)[1].strip().strip("`")
        assert (PROJECT_ROOT / source).exists(), row
    assert markdown.BEGIN not in text and "results/README.md" in text


@pytest.mark.slow  # make test-all: answers every question from the committed two-GPU main job, draws its figures
def test_report_md_is_the_pdf_outline_answered_from_one_run(answered_once):
    """results/REPORT.md is generated from the committed two-GPU main job (perflab report --markdown fixes it):
    at most 1000 lines, every question of the seeds' outline a heading, in the PDF's order, each figure it shows
    committed, and its appendix links CAMPAIGNS.md."""
    import re

    from perflab.report import questions
    from perflab.results import RESULTS_ROOT
    text = (RESULTS_ROOT / "REPORT.md").read_text()
    campaigns = (RESULTS_ROOT / "CAMPAIGNS.md").read_text()
    assert text == markdown.outline_markdown(figures=answered_once.figures, campaigns=campaigns)
    assert len(text.splitlines()) <= 1000
    headings = re.findall(r"^### (.+?): ", text, flags=re.M)
    assert headings == [q.id for q in questions.QUESTIONS]
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert figures and [f for f in figures if not (RESULTS_ROOT / f).exists()] == []
    assert sorted(f.name for f in answered_once.figures.glob("*.png")) == sorted(Path(f).name for f in figures)
    own = re.findall(r"\]\(#(.+?)\)", text)
    assert own and set(own) <= {markdown.anchor(h) for h in re.findall(r"^#{2,3} (.+)$", text, flags=re.M)}
    linked = re.findall(r"\]\(CAMPAIGNS\.md#(.+?)\)", text)
    assert linked and linked == [markdown.anchor(h) for h in re.findall(r"^## (.+)$", campaigns, flags=re.M)[1:]]


@pytest.mark.slow  # make test-all: regenerates the campaign tables from every committed result file
def test_campaigns_md_is_what_the_result_files_say_now():
    """results/CAMPAIGNS.md, REPORT.md's appendix, is generated from the committed files: regenerate and compare
    (perflab report --markdown fixes it). It goes by question: a list of them opens it, the seeds' first, then
    the campaign's, each a link to its section, and no question is asked twice."""
    import re

    from perflab.results import RESULTS_ROOT
    text = (RESULTS_ROOT / "CAMPAIGNS.md").read_text()
    assert text == markdown.analysis_markdown()
    assert "[REPORT.md](REPORT.md)" in text.split("\n## ")[0]
    contents = text[text.index("## Contents"):text.index("\n## ", text.index("## Contents"))]
    seeds, campaign = contents.split("The campaign's questions:")
    asked = re.findall(r"^## (.+)$", text, flags=re.M)[1:]
    linked = re.findall(r"^- \[(.+?)\]\(#(.+?)\)$", contents, flags=re.M)
    assert [q for q, _ in linked] == asked and len(set(asked)) == len(asked)
    assert [a for _, a in linked] == [markdown.anchor(q) for q in asked]
    assert "Questions 2.1 and 2.2" in seeds and "Question 2.4" in seeds and "predicts" in campaign
    assert asked.index(markdown.Q_FLOPS) < asked.index(markdown.Q_RATES) < asked.index(markdown.Q_ROOFLINES)
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert figures and [f for f in figures if not (RESULTS_ROOT / f).exists()] == []  # every figure it shows is there


def test_readme_starts_with_the_two_commands():
    text = (PROJECT_ROOT / "README.md").read_text()
    head = text[:text.index("## Measured")]
    assert "make roofline" in head and "make test" in head


def test_readme_main_job_durations_are_the_logs():
    """The README's main job durations are the committed main jobs' own: the one-H100 job's estimate and time
    (its mainjob_parts.csv), the two-H200 job's resumed call (its log)."""
    import re
    text = " ".join((PROJECT_ROOT / "README.md").read_text().split())
    said = re.search(r"On one H100 at (\w+) it said ([\d.]+) min and took ([\d.]+),.* resumed call of (\d+) s", text)
    assert said, "the README no longer says the main job's durations"
    parts = pd.read_csv(PROJECT_ROOT / "results" / "nvidia-h100-80gb-hbm3" / f"mainjob_{said.group(1)}" / "mainjob_parts.csv")
    whole = parts[parts.part == "whole job"].iloc[-1]
    assert said.group(2, 3) == (f"{whole.estimated_s / 60:.1f}", f"{whole.measured_s / 60:.1f}")
    log = (PROJECT_ROOT / "results" / "nvidia-h200" / "mainjob_877c899" / "mainjob.log").read_text()
    assert said.group(4) == re.findall(r"main job took (\d+) s", log)[-1]


def test_a_report_section_no_question_claims_is_named_not_lost():
    with pytest.raises(ValueError, match="CAMPAIGNS.md section 'A new study, x' answers none of markdown.QUESTIONS"):
        markdown.by_question(["# t", "", "intro", "", "## A new study, x", "", "text"])
    text = markdown.by_question(["# t", "", "intro", "", f"## {markdown.Q_RATES}, GPU x2", "", "### detail", "", "t"])
    assert f"## {markdown.Q_RATES}\n\n### GPU x2\n" in text and "#### detail" in text


def test_the_readme_lists_every_command_and_the_reference_page_names_only_files_that_exist():
    """The Commands table names each `perflab` command once (a new one must be added there); docs/COMMANDS.md,
    which the table sends readers to, cites only committed files that exist."""
    import re

    from perflab.cli import build_parser
    text = (PROJECT_ROOT / "README.md").read_text()
    section = text[text.index("## Commands"):text.index("\n## ", text.index("## Commands"))]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = [re.match(r"\| `(?:mpiexec -n P )?perflab (\w+)", row).group(1) for row in rows]
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    assert set(named) == set(commands), set(named) ^ set(commands)
    reference = (PROJECT_ROOT / "docs" / "COMMANDS.md").read_text()
    cited = re.findall(r"`((?:results|experiments|scripts|perflab)/[^`* ]+)`", reference)
    assert cited and [c for c in cited if not (PROJECT_ROOT / c).exists()] == []


def test_the_headline_claims_are_data_markdown_names_none_of_their_files_machines_or_peers():
    """Claims as data (issue 67, item 7): each headline row is a claim of the results root's claims file; the
    headline's code and the renderer name none of their sources or peer labels, and markdown.py no machine key."""
    import re

    from perflab.report import claims
    headline = claims.load("headline")
    rows = [line for line in markdown.headline().splitlines()[2:] if line.startswith("|")]
    assert len(rows) == len(headline)
    import inspect
    code = inspect.getsource(markdown.headline) + (PROJECT_ROOT / "perflab" / "report" / "claims.py").read_text()
    labels = {c["source"] for c in headline} | {c["source"].split("/")[0] for c in headline}
    labels |= {peer for c in headline for q in c.get("values", {}).values()
               for peer in [q.get("mine"), *q.get("against", [])] if peer}
    labels.discard("predictions")  # a folder every results root has, not a claim's choice
    assert not [label for label in labels if f'"{label}"' in code or f"'{label}'" in code]
    assert not re.search(r"nvidia-h\d", code + (PROJECT_ROOT / "perflab" / "report" / "markdown.py").read_text())


def test_a_claim_is_rendered_from_its_source_and_a_wrong_peer_is_refused(tmp_path):
    import json

    from perflab.report import claims
    root = tmp_path / "results"
    (root / "m").mkdir(parents=True)
    (root / "m" / "bench.csv").write_text("H,B,peer,epoch_ms\n512,800,mine,2\n512,800,theirs,4\n"
                                          "1024,800,mine,3\n1024,800,theirs,4\n")
    claim = {"claim": "mine over theirs", "source": "m/bench.csv", "measured": "{r}",
             "values": {"r": {"op": "ratio", "mine": "mine", "against": ["theirs"], "format": ".2f"}}}
    gone = {**claim, "source": "m/missing.csv"}
    (root / claims.CLAIMS_FILE).write_text(json.dumps({"headline": [claim, gone]}))
    assert claims.render(claims.load("headline", root), root) == [
        {"claim": "mine over theirs", "measured": "0.50 to 0.75", "source": "`results/m/bench.csv`"}]
    claim["values"]["r"]["against"] = ["nobody"]
    with pytest.raises(ValueError, match="nobody"):
        claims.render([claim], root)
