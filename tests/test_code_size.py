"""Code a reader can hold (issue 67): no function in perflab/ over 60 lines and no class over 250, counted as
ast counts them (the `def` or `class` line to the last line of the body, decorators left out)."""
import ast

from perflab.data import PROJECT_ROOT

PERFLAB = PROJECT_ROOT / "perflab"
MAX_FUNCTION, MAX_CLASS = 60, 250


def too_long(source: str) -> list[tuple[str, int, int, int]]:
    """(name, first line, lines, limit) of each function or class of a module over its limit; a method is named
    with its class, a nested function with the function around it."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                limit = MAX_CLASS if isinstance(child, ast.ClassDef) else MAX_FUNCTION
                lines = child.end_lineno - child.lineno + 1
                if lines > limit:
                    found.append((name, child.lineno, lines, limit))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)
    visit(ast.parse(source), "")
    return found


def test_the_counter_names_long_functions_and_classes_and_leaves_decorators_out():
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    fits = f"@decorator\n@another\ndef fits():\n{body}\n"  # 60 lines from its def, 62 with its decorators
    assert too_long(fits) == []
    long = f"class Holder:\n    def method(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n        return 1\n"
    assert too_long(long) == [("Holder.method", 2, 61, 60)]
    big = "class Big:\n" + "\n".join(f"    a{i} = {i}" for i in range(250)) + "\n"
    assert too_long(big) == [("Big", 1, 251, 250)]


def test_no_function_over_60_lines_and_no_class_over_250_in_perflab():
    found = [f"{path.relative_to(PROJECT_ROOT).as_posix()}:{line}: {name} is {lines} lines (at most {limit})"
             for path in sorted(PERFLAB.rglob("*.py")) for name, line, lines, limit in too_long(path.read_text())]
    assert not found, "split these into helpers that each do one thing:\n" + "\n".join(found)
