"""experiments/README.md indexes every experiment, names the commit each patch applies to, and states where
an experiment's data lives; these tests hold it to that."""
import ast
import fnmatch
import re
import subprocess
from pathlib import Path

import pytest

from perflab.data import PROJECT_ROOT

EXPERIMENTS = PROJECT_ROOT / "experiments"
INDEX = EXPERIMENTS / "README.md"
CODE = {".py", ".sh", ".cu", ".patch", ".md"}
DATA_LIMIT = 1 << 20  # the data rule: each data file under 1 MiB


def _table(heading):
    """The rows (lists of cells) of the first table under `heading` in the index."""
    text = INDEX.read_text().split(f"## {heading}\n", 1)[1]
    lines = [line for line in text.split("\n## ", 1)[0].splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def _ticked(text):
    return re.findall(r"`([^`]+)`", text)


def _folders():
    return sorted(p.name for p in EXPERIMENTS.iterdir() if p.is_dir())


def _git(*args, **kw):
    return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, **kw)


def _has_history():
    return _git("cat-file", "-e", "3327f03^{commit}").returncode == 0


def test_every_experiment_folder_has_a_row_and_a_readme():
    rows = {re.search(r"\[`(\w+)/`\]", row[0]).group(1) for row in _table("Index")}
    assert rows == set(_folders())
    for name in _folders():
        assert (EXPERIMENTS / name / "README.md").exists(), name
    assert all(len(row) == 6 and all(row) for row in _table("Index")), "question, verdict, commits, data, landed"


def _covered(path, tokens):
    rel = path.relative_to(EXPERIMENTS).as_posix()
    folder = rel.split("/", 1)[0]
    for token in tokens:
        token = token.removeprefix("experiments/")
        for pattern in (token, f"{folder}/{token}"):
            if fnmatch.fnmatch(rel, pattern) or (pattern.endswith("/") and rel.startswith(pattern)):
                return True
    return False


def test_every_file_is_named_in_the_index_or_its_folders_readme():
    index = INDEX.read_text()
    missing = []
    for path in sorted(p for p in EXPERIMENTS.rglob("*") if p.is_file() and p.name != "README.md"):
        folder = path.relative_to(EXPERIMENTS).parts[0]
        row = next(" ".join(r) for r in _table("Index") if f"`{folder}/`" in r[0])
        own = EXPERIMENTS / folder / "README.md"
        tokens = _ticked(index) + _ticked(own.read_text() if own.exists() else "")
        if not _covered(path, [t for t in tokens if "/" in t or "." in t]) and not _covered(path, _ticked(row)):
            missing.append(str(path.relative_to(PROJECT_ROOT)))
    assert not missing, f"name these in experiments/README.md or their folder's README: {missing}"


def test_every_patch_is_in_the_patch_table():
    listed = {row[0].strip("`") for row in _table("Patches")}
    assert listed == {p.relative_to(EXPERIMENTS).as_posix() for p in EXPERIMENTS.rglob("*.patch")}


def _patch_files(patch):
    """(old name, new name) of each file the patch touches."""
    lines = patch.read_text(errors="replace").splitlines()
    return [(a[4:].split("\t")[0].strip(), b[4:].split("\t")[0].strip())
            for a, b in zip(lines, lines[1:]) if a.startswith("--- ") and b.startswith("+++ ")]


@pytest.mark.skipif(not _has_history(), reason="needs the repository's git history (not a shallow clone)")
@pytest.mark.parametrize("row", _table("Patches"), ids=lambda row: row[0].strip("`"))
def test_each_patch_applies_at_its_commit(row, tmp_path):
    patch = EXPERIMENTS / row[0].strip("`")
    commit = row[1]
    copy_of = re.search(r"`([^`]+)` as `([^`]+)`", row[2])  # a copy of a product file under another name
    names = _patch_files(patch)
    strip = 0 if copy_of else 1
    for old, new in names:
        for name in {old, new}:
            source = copy_of.group(1) if copy_of else name.split("/", 1)[1]
            blob = _git("show", f"{commit}:{source}")
            if blob.returncode == 0:
                target = tmp_path / (name if copy_of else name.split("/", 1)[1])
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(blob.stdout)
    applied = subprocess.run(["git", "apply", "--check", f"-p{strip}", str(patch)], cwd=tmp_path,
                             capture_output=True, text=True)
    assert applied.returncode == 0, f"{patch.name} no longer applies at {commit}: {applied.stderr}"


@pytest.mark.skipif(not _has_history(), reason="needs the repository's git history (not a shallow clone)")
def test_every_commit_the_index_names_exists():
    commits = {c for row in _table("Index") for c in re.findall(r"\b[0-9a-f]{7,40}\b", row[3])}
    assert commits
    missing = [c for c in sorted(commits) if _git("cat-file", "-e", f"{c}^{{commit}}").returncode]
    assert not missing


def test_data_lives_in_its_experiments_folder_and_stays_small():
    """The data rule: data files lie under experiments/<name>/ (logs/ for the newer ones), each under 1 MiB."""
    text = INDEX.read_text()
    assert "## Where data lives (the data rule)" in text
    beside = {"deep", "half", "nccl_graph", "gemm"}  # the older folders keep data beside the scripts, as stated
    for path in (p for p in EXPERIMENTS.rglob("*") if p.is_file() and p.suffix not in CODE):
        parts = path.relative_to(EXPERIMENTS).parts
        assert len(parts) >= 2, f"{path}: data belongs in an experiment's folder"
        assert parts[0] in beside or parts[1] == "logs", f"{path}: an experiment's data goes in its logs/"
        assert path.stat().st_size < DATA_LIMIT, f"{path}: over 1 MiB; summarize it"
    for name in beside:
        assert f"`{name}/`" in text.split("## Where data lives", 1)[1]


def _code_strings(path):
    """The string constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs]


def test_no_product_code_reads_an_experiments_data():
    """The data rule: perflab names no data file under experiments/ in its code (a README link is fine)."""
    offenders = []
    for path in sorted((PROJECT_ROOT / "perflab").rglob("*.py")):
        for value in _code_strings(path):
            for hit in re.findall(r"experiments/[\w./*-]+", value):
                if Path(hit).suffix and Path(hit).suffix not in CODE:  # a folder or a README may be named
                    offenders.append(f"{path.relative_to(PROJECT_ROOT)}: {hit}")
    assert not offenders


@pytest.mark.parametrize("args", [["--al"], ["--all", "perflab"], ["/nonexistent/kernels"]])
def test_sass_counts_refuses_what_is_not_a_kernels_folder_naming_it(args, tmp_path):
    """experiments/half/sass_counts.py: a misspelt option or a folder without gemm_wgmma.cu is refused before nvcc
    runs, naming the value and what it takes."""
    import sys
    run = subprocess.run([sys.executable, str(EXPERIMENTS / "half" / "sass_counts.py"), *args], capture_output=True,
                         text=True, cwd=tmp_path)
    assert run.returncode != 0 and repr(args[-1]) in run.stderr and "gemm_wgmma.cu" in run.stderr, run.stderr


@pytest.mark.parametrize("args, named", [(["gemms", "defualt", "out.jsonl"], "'defualt'"),
                                         (["gemm", "none", "out.jsonl"], "'gemm'"), (["trace"], "['trace']")])
def test_cublas_workspace_refuses_a_command_or_mode_it_lacks_naming_it(args, named, tmp_path):
    """experiments/half/cublas_workspace.py: a misspelt command or mode is refused before any GPU work, naming the
    value and what it takes; nothing is written."""
    import sys
    run = subprocess.run([sys.executable, str(EXPERIMENTS / "half" / "cublas_workspace.py"), *args], capture_output=True,
                         text=True, cwd=tmp_path)
    allowed = "default, workspace, none" if args[0] == "gemms" else "gemms, trace, train"
    assert run.returncode != 0 and named in run.stderr and allowed in run.stderr, run.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("script", ["gemm_ab.sh", "epochs_ab.sh"])
@pytest.mark.parametrize("sides, named", [("after nosuch", "'nosuch'"), ("before after", "'before'")])
def test_the_ab_scripts_refuse_a_side_without_a_tree_naming_it(script, sides, named, tmp_path):
    """experiments/half/{gemm_ab,epochs_ab}.sh (sides.sh): a side in SIDES whose tree is not there is refused before
    anything runs, naming the side and what SIDES takes; nothing is written to OUT."""
    import os
    import shutil
    half = tmp_path / "experiments" / "half"
    half.mkdir(parents=True)
    for name in (script, "sides.sh"):
        shutil.copy(EXPERIMENTS / "half" / name, half / name)
    (tmp_path / "perflab").mkdir()
    env = {**os.environ, "SIDES": sides, "OUT": str(tmp_path / "out"), "AFTER_COMMIT": "a", "BEFORE_COMMIT": "b"}
    run = subprocess.run(["bash", f"experiments/half/{script}"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert run.returncode == 2 and f"side {named} has no tree" in run.stderr and '"after"' in run.stderr, run.stderr
    assert not any((tmp_path / "out").iterdir())
