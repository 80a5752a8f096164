"""The package's shape: rooms by stage of the data flow, arrows one way, no import circle."""
import ast
import functools
from pathlib import Path

import perflab

PACKAGE = Path(perflab.__file__).parent
LOWER = ("perflab.train", "perflab.kernels")  # what trains: it never reaches up into what measures or reports
UPPER = ("perflab.measure", "perflab.analysis", "perflab.report", "perflab.workbook", "perflab.commands", "perflab.cli")


def modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = f.with_suffix("").relative_to(PACKAGE.parent).parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


@functools.cache  # parsing every module takes about a second; the tests only read the graph
def imports() -> dict[str, set[str]]:
    """Every perflab module each module imports, at the top or inside a function (ast, not run)."""
    mods, graph = modules(), {}
    for name, f in mods.items():
        package = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    edges.add(sub if sub in mods else base)
            elif isinstance(node, ast.Import):
                edges |= {a.name for a in node.names}
        graph[name] = {e for e in edges if e in mods and e != name}
    return graph


def test_no_module_imports_itself_round_a_circle():
    graph, state, circles = imports(), {}, []

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                circles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"
    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_training_and_kernels_never_import_what_measures_or_reports():
    wrong = {(m, e) for m, edges in imports().items() if m.startswith(LOWER) for e in edges if e.startswith(UPPER)}
    assert not wrong, sorted(wrong)


def test_every_module_sits_in_a_room_or_below_them_all():
    base = {"perflab", "perflab.__main__", "perflab.cli", "perflab.config", "perflab.data", "perflab.results",
            "perflab.backend", "perflab.timing"}
    rooms = LOWER + UPPER[:-1]
    loose = [m for m in modules() if m not in base and not m.startswith(rooms)]
    assert not loose, loose
    graph = imports()
    below = {e for m in base - {"perflab.cli", "perflab.__main__"} for e in graph[m]}
    assert not {e for e in below if e.startswith(rooms)}, "the base modules must not import from the rooms"


def test_the_gemm_story_is_readable_from_the_tree():
    """Every step of the GEMM's progression is marked in its .cu file, in order, and kept by a
    committed result file (perflab.kernels.progression; the kernels notebook prints it)."""
    from perflab.kernels import KERNEL_DIR
    from perflab.kernels.progression import STEPS, marker
    from perflab.results import RESULTS_ROOT
    assert [s[0] for s in STEPS] == list(range(1, len(STEPS) + 1))
    for step, what, source, kept_by, _ in STEPS:
        text = (KERNEL_DIR / source).read_text()
        assert text.count(marker(step)) == 1, f"step {step} ({what}) is not marked once in {source}"
        assert (RESULTS_ROOT / kept_by).exists(), kept_by
    best = (KERNEL_DIR / "gemm_best.cu").read_text()
    assert all(f"{marker(s[0])} {s[1].split(':')[0]}" in best for s in STEPS if s[2] == "gemm_best.cu")


def test_the_readme_layout_names_every_room_and_module():
    readme = (PACKAGE.parent / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    layout = layout[:layout.index("\n## ")] if "\n## " in layout else layout
    for name in modules():
        parts = name.split(".")[1:]
        if not parts or parts[-1] in ("__main__",):
            continue
        room = f"`{parts[0]}/`" if len(parts) > 1 else None
        assert f"`{parts[-1]}`" in layout or (len(parts) == 1 and f"`{parts[0]}/`" in layout), name
        assert room is None or room in layout, name


ABSOLUTE_PATH = r"(?:^|[\s\"'(=:])(/(?:[A-Za-z0-9._+-]+/)+[A-Za-z0-9._+-]*)"


def test_no_committed_result_names_an_absolute_path():
    """Results travel: a path in results/ is named from the repository's root (perflab.results.relative),
    never by the writer's checkout, home or temporary folder."""
    import re
    import subprocess
    root = PACKAGE.parent
    files = subprocess.run(["git", "ls-files", "results"], cwd=root, capture_output=True, text=True).stdout.split()
    assert len(files) > 100
    found = {}
    for name in files:
        try:
            text = (root / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):  # figures; a file deleted in the work tree
            continue
        paths = re.findall(ABSOLUTE_PATH, text, flags=re.M)
        if paths:
            found[name] = paths[:2]
    assert not found, found


def test_paths_inside_the_repository_are_named_from_its_root(tmp_path):
    import re

    from perflab import results
    from perflab.data import PROJECT_ROOT
    assert results.relative(PROJECT_ROOT / "results" / "x" / "ceilings_p2.csv") == "results/x/ceilings_p2.csv"
    assert results.relative(tmp_path / "a.csv") == str(tmp_path / "a.csv")  # outside it: as given
    text = f"results go to {PROJECT_ROOT}/runs/m/roofline.csv; cwd {PROJECT_ROOT}"
    assert results.relative_text(text) == "results go to runs/m/roofline.csv; cwd ."
    assert re.findall(ABSOLUTE_PATH, f"wrote {tmp_path}/x.csv") and not re.findall(ABSOLUTE_PATH, "ms/batch 3 / 4")


def test_the_code_and_documents_say_boot_not_lend():
    """A user's machine is not lent: one run of a machine is a boot (the metadata's `boot`). The code,
    what it prints and the documents say so; only the names of blind checks made before keep the word."""
    import re
    import subprocess
    root = PACKAGE.parent
    names = subprocess.run(["git", "ls-files", "perflab", "notebooks", "tests", "scripts", "experiments", "*.md"],
                           cwd=root, capture_output=True, text=True).stdout.split()
    said = {}
    for name in names:
        if name.endswith((".csv", ".json", ".jsonl", ".ipynb", ".log", ".pdf", ".png", ".svg")) or name == "tests/test_layout.py":
            continue  # data a run wrote (its words are the record of that run); this test, which names the word
        try:
            text = (root / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        words = re.findall(r"\b(?:lend|lends|lent|lending)\b", text, flags=re.I)
        if words:
            said[name] = words[:3]
    assert len(names) > 100 and not said, said
