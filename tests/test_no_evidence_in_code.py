"""Product code names no evidence (issue 67, item 7): perflab/'s comments and docstrings, and its CUDA sources'
comments, hold no results/ or experiments/ path and no measured number; the evidence for a choice lives in
docs/DECISIONS.md, and the code keeps one plain line of reason. Code that reads result files (the report's) is not
scanned here."""
import ast
import io
import re
import tokenize

from perflab.data import PROJECT_ROOT

PERFLAB = PROJECT_ROOT / "perflab"

# Files other work is editing now; their evidence is listed in docs/DECISIONS.md and moves out next.
# This set must shrink to empty.
NOT_YET: set[str] = set()

PATH = re.compile(r"(?<![\w.])(results|experiments|gemm_experiments)/")  # the last: results' GEMM A/Bs, cited bare
NUMBER = r"(?<![\w.])\d+(?:\.\d+)?(?:\s*[-–]\s*\d+(?:\.\d+)?)?"
UNIT = r"(?:\s?(?:ms|us|µs|ns|s|GB/s|TB/s|GiB/s|MB/s|TFLOP/s|GFLOP/s)\b|\s?%|(?:x|×)(?![\w]))"
MEASURED = re.compile(NUMBER + UNIT)
CUDA_SUFFIXES = (".cu", ".cuh")
CUDA_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)  # strings skipped


def _comments(source):
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string


def _docstrings(source):
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = node.body[0] if node.body else None
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str):
                for offset, line in enumerate(doc.value.value.splitlines()):
                    yield doc.lineno + offset, line


def _cuda_comments(source):
    """(line, text) of each line of a CUDA source's // and /* */ comments."""
    for match in CUDA_TOKEN.finditer(source):
        if match.group().startswith("/"):
            first = source.count("\n", 0, match.start()) + 1
            for offset, line in enumerate(match.group().splitlines()):
                yield first + offset, line


def _notes(source, cuda=False):
    return list(_cuda_comments(source)) if cuda else [*_comments(source), *_docstrings(source)]


def evidence(source, cuda=False):
    """(line, text) of each comment or docstring line that names a result path or a measured number."""
    found = []
    for lineno, text in _notes(source, cuda):
        if PATH.search(text) or MEASURED.search(text):
            found.append((lineno, text.strip()))
    return found


def _sources():
    return sorted(p for p in PERFLAB.rglob("*") if p.suffix in (".py", *CUDA_SUFFIXES))


def _scanned():
    for path in _sources():
        rel = path.relative_to(PROJECT_ROOT).as_posix()
        if rel not in NOT_YET:
            yield rel, path


def test_the_scanner_finds_paths_and_measured_numbers():
    source = ('"""Fast: 1.2 ms a step (results/x.csv)."""\n'
              "x = 1  # 3xTF32 is a name, 0.93x a ratio, 12% a share\n"
              "y = 2  # a plain reason, 3 layers, 784 inputs\n")
    lines = [text for _, text in evidence(source)]
    assert lines == ["# 3xTF32 is a name, 0.93x a ratio, 12% a share", "Fast: 1.2 ms a step (results/x.csv)."]
    for text in ("# 250 GB/s over NVLink", "# 190 TFLOP/s", "# 27 us", "# 1.03-1.05x"):
        assert evidence(f"z = 0  {text}\n"), text


def test_the_scanner_reads_cuda_comments_and_skips_strings():
    source = ('// Fast: 27.5 us (experiments/p2p/README.md)\n'
              'int x = 1;  /* a plain reason,\n   3 more: 1.2x */\n'
              'printf("took 6 us // not a comment");\n')
    assert evidence(source, cuda=True) == [(1, "// Fast: 27.5 us (experiments/p2p/README.md)"), (3, "3 more: 1.2x */")]


def test_no_result_path_or_measured_number_in_perflab_comments_and_docstrings():
    found = [f"{rel}:{line}: {text}" for rel, path in _scanned()
             for line, text in evidence(path.read_text(), cuda=path.suffix in CUDA_SUFFIXES)]
    assert not found, "move these to docs/DECISIONS.md:\n" + "\n".join(found)


def test_not_yet_names_only_files_that_exist():
    for rel in NOT_YET:
        assert (PROJECT_ROOT / rel).exists(), rel


def test_every_decision_the_code_cites_has_its_entry():
    """A comment's `docs/DECISIONS.md, D<n>` (or a bare `D<n>` beside it) names an entry there with its evidence."""
    entries = set(re.findall(r"^\*\*(D\d+)\. ", (PROJECT_ROOT / "docs" / "DECISIONS.md").read_text(), re.M))
    cited = set()
    for path in _sources():
        for _, line in _notes(path.read_text(), cuda=path.suffix in CUDA_SUFFIXES):
            cited |= set(re.findall(r"\b(D\d+)\b", line))
    assert cited and cited <= entries, sorted(cited - entries)


def test_every_commit_docs_decisions_names_exists():
    import subprocess

    import pytest
    text = (PROJECT_ROOT / "docs" / "DECISIONS.md").read_text()
    commits = set(re.findall(r"Commits? ([0-9a-f]{7}(?:(?: \([^)]*\))?, [0-9a-f]{7})*)", text))
    hashes = {h for group in commits for h in re.findall(r"\b[0-9a-f]{7}\b", group)}

    def known(commit):
        return subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=PROJECT_ROOT,
                              capture_output=True).returncode == 0
    if not known("3327f03"):
        pytest.skip("needs the repository's git history")
    assert len(hashes) > 20 and not [h for h in sorted(hashes) if not known(h)]


# The report's code reads committed result files: it names none of them, nor a machine folder; campaigns.json under
# the results root does (perflab.report.claims), so a result file moves without touching code.
REPORT_CODE = ("perflab/report/markdown.py",)
RESULT_FILE = re.compile(r"\w[\w*\-]*\.(?:csv|jsonl|json|log)\b")


def machine_keys():
    """The committed machine folders' names (those with a hyphen: figures/ and predictions/ are no machine)."""
    from perflab.results import RESULTS_ROOT
    return sorted(p.name for p in RESULTS_ROOT.iterdir() if p.is_dir() and "-" in p.name)


def named_results(source, machines=()):
    """(line, text) of each string literal outside docstrings (f-strings' text included) naming a result file
    or one of `machines`."""
    machine = re.compile(r"(?<![\w-])(?:" + "|".join(map(re.escape, machines)) + r")(?![\w-])") if machines else None
    tree = ast.parse(source)
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            and (RESULT_FILE.search(node.value) or (machine and machine.search(node.value)))]


def test_the_literal_scanner_finds_result_files_and_machine_folders_not_docstrings():
    source = ('def f(root):\n    """Reads bench_train.csv."""\n'
              '    a = root.glob("*/bench_hold.csv")\n    b = f"{root}/nvidia-h200/x"\n'
              '    c = "results/" + "a report.md, 3.5 ms"\n    return sorted(root.glob("*/*.csv"))\n')
    assert named_results(source, ["nvidia-h200"]) == [(3, "*/bench_hold.csv"), (4, "/nvidia-h200/x")]
    assert named_results('x = "nvidia-smi, nvidia-h200-x4"\n', ["nvidia-h200"]) == []


def test_the_report_code_names_no_result_file_or_machine_folder():
    found = [f"{rel}:{line}: {text!r}" for rel in REPORT_CODE
             for line, text in named_results((PROJECT_ROOT / rel).read_text(), machine_keys())]
    assert not found, "name these in results/campaigns.json (perflab.report.claims.section):\n" + "\n".join(found)


def test_every_section_campaigns_json_lists_is_drawn_and_finds_its_files():
    """Each page's sections have a function that draws them and an entry; each entry's file patterns match
    committed files (a renamed or moved file is named, not silently left out of the page)."""
    from perflab.report import claims, markdown
    from perflab.results import RESULTS_ROOT
    drawn = {"campaigns": markdown.CAMPAIGN_SECTIONS, "readme": markdown.README_SECTIONS}
    for page, functions in drawn.items():
        names = claims.page(page)
        assert names and set(names) == set(functions), (page, set(names) ^ set(functions))
        for name in names:
            patterns = claims.section(name).get("files", [])
            patterns = [patterns] if isinstance(patterns, str) else list(patterns)
            assert all(list(RESULTS_ROOT.glob(p)) for p in patterns), (name, patterns)
