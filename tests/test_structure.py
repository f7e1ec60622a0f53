"""The shape of the code that makes the next change cheap (DESIGN.md): one writer of ``metrics.json`` and
one reader of finished runs, no branch on the attack kind outside the kinds' table, no function over
eight parameters, no file over 600 lines. Each test names what breaks its rule."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import physattack

PACKAGE = Path(physattack.__file__).parent
WRITERS = {"save_json", "save_text", "save_with", "write_text", "write_bytes", "dump"}


def modules() -> list[tuple[str, ast.Module, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        out.append((str(path.relative_to(PACKAGE.parent)), ast.parse(text), text))
    return out


def calls_naming(tree: ast.Module, words: tuple[str, ...], functions: set[str]) -> list[int]:
    """Lines of calls to ``functions`` whose arguments (or the object they are called on) name one of ``words``."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in functions:
            continue
        text = ast.unparse(node)
        if any(w in text for w in words):
            lines.append(node.lineno)
    return lines


def test_metrics_json_is_written_in_exactly_one_place():
    found = [(path, line) for path, tree, _ in modules()
             for line in calls_naming(tree, ("metrics.json", "METRICS_FILE", "metrics_path"), WRITERS)]
    assert [p for p, _ in found] == ["physattack/run_report.py"], (
        f"metrics.json is written at {found}: add a section to the run report (physattack/run_report.py) instead")


def test_finished_runs_are_read_through_one_function():
    """Only ``run_report.read_report`` parses ``metrics.json`` and only ``cli/runs.py`` reads a run's
    ``config.yaml``; every command opens a finished run with ``cli.runs.open_run``."""
    readers = {"loads", "load", "read_text"}
    metrics = [(p, line) for p, tree, _ in modules() for line in calls_naming(tree, ("metrics.json", "METRICS_FILE"),
                                                                              readers)]
    assert metrics == [("physattack/run_report.py", metrics[0][1])] if metrics else True, metrics
    configs = [(p, line) for p, tree, _ in modules() for line in calls_naming(tree, ('"config.yaml"',), readers)]
    assert {p for p, _ in configs} <= {"physattack/cli/runs.py"}, configs


def test_no_branch_on_the_attack_kind_in_cli_outside_the_kinds_table():
    pattern = re.compile(r"kind ==|is_detector|isinstance\(.*Detector")
    hits = [f"{p}:{i}: {line.strip()}" for p, _, text in modules() if p.startswith("physattack/cli/")
            and not p.startswith("physattack/cli/kinds/")
            for i, line in enumerate(text.splitlines(), 1) if pattern.search(line)]
    assert not hits, "branches on the attack kind outside physattack/cli/kinds:\n" + "\n".join(hits)


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    return n - (1 if a.args and a.args[0].arg in ("self", "cls") else 0)


def test_no_function_takes_more_than_eight_parameters():
    """Group what travels together into a dataclass (a dataclass's generated constructor is exempt)."""
    long = [f"{p}:{node.lineno} {node.name} ({parameter_count(node)})" for p, tree, _ in modules()
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and parameter_count(node) > 8]
    assert not long, "functions over 8 parameters:\n" + "\n".join(long)


def test_no_file_is_over_600_lines():
    long = [f"{p} ({len(text.splitlines())})" for p, _, text in modules() if len(text.splitlines()) > 600]
    assert not long, "files over 600 lines: " + ", ".join(long)
