"""The arrows of shared/DESIGN.md's parts table, held by parsing every module's imports.

Every ``import physattack.X...`` / ``from physattack.X import ...`` anywhere in a module (inside
functions and ``TYPE_CHECKING`` blocks too) is an arrow from the module's part to X's part, except in
a module's ``if __name__ == "__main__":`` block, which is a command shim (it may call cli). A part
may import only the parts ``ALLOWED`` lists for it (its own modules, and the shared top-level
modules, always); and the arrows between parts have no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import physattack

PACKAGE = Path(physattack.__file__).parent

#: Top-level modules every part may use; they import only each other.
SHARED = {"__init__", "errors", "atomic", "config", "imageio", "labels", "units", "run_report"}

#: Entry points outside ``cli/``: ``python -m`` shims over ``physattack.cli`` (they count as cli).
COMMAND_SHIMS = {"__main__", "export", "transfer", "atlas", "calibrate", "evaluate_photos", "drive.__main__",
                 "evaluate.__main__", "train.__main__"}

PARTS = ["scene", "render", "eot", "patch", "printing", "victims", "attack", "evaluate", "drive", "train", "tracking",
         "cli"]

#: part -> the parts it may import. From DESIGN.md: scene knows none of them; render draws scenes;
#: eot samples and renders views of them; printing knows no patch (the patch uses its palette) and
#: no victim; a victim knows no renderer (nor scene, eot, evaluate); evaluation composes the parts but
#: neither the optimization nor drives; drives compose the parts and may use evaluate's metrics (never
#: the reverse) but not the optimization; attack composes the parts and may use drive's trajectories and
#: stacks (the decision-level objective); training composes what attack composes minus patches and
#: knows no evaluation report; only cli composes attack, evaluate, drive and train, and nothing imports cli.
ALLOWED = {
    "scene": set(),
    "render": {"scene"},
    "eot": {"scene", "render"},
    "printing": {"scene"},
    "patch": {"scene", "printing"},
    "victims": set(),
    "tracking": set(),
    "evaluate": {"scene", "render", "eot", "printing", "patch", "victims", "tracking"},
    "drive": {"scene", "render", "eot", "printing", "patch", "victims", "tracking", "evaluate"},
    "attack": {"scene", "render", "eot", "printing", "patch", "victims", "tracking", "drive"},
    "train": {"scene", "render", "eot", "victims", "tracking"},
    "cli": set(PARTS) - {"cli"},
}

#: Arrows that break the rules today and who removes them: (from module, to part) -> why.
KNOWN = {}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" and len(rel.parts) > 1 else rel.parts
    return ".".join(parts)


def part_of(module: str) -> str:
    """The part a module (dotted, without the leading ``physattack.``) belongs to."""
    if module in COMMAND_SHIMS:
        return "cli"
    head = module.split(".")[0]
    if head in SHARED and "." not in module:
        return "shared"
    if head in PARTS:
        return head
    raise AssertionError(f"physattack.{module} belongs to no part: add it to a part's package, or to SHARED or "
                         "COMMAND_SHIMS in tests/test_imports.py")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module without ``physattack.``) for every physattack import in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    shims = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) in
             ("__name__ == '__main__'", '__name__ == "__main__"')]
    in_shim = {id(sub) for n in shims for sub in ast.walk(n)}
    found = []
    for node in ast.walk(tree):
        if id(node) in in_shim:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:                                   # relative: resolve against this package
                base = package[:len(package) - node.level + 1] if node.level > 1 else package
                base_name = ".".join(["physattack", *base])
                mod = f"{base_name}.{node.module}" if node.module else base_name
            else:
                mod = node.module or ""
            # ``from physattack import render`` names a part; ``from physattack.eot import X`` does not
            names = [f"{mod}.{a.name}" for a in node.names] if mod == "physattack" else [mod]
        else:
            continue
        for name in names:
            if name == "physattack" or name.startswith("physattack."):
                rest = name[len("physattack."):] if name != "physattack" else "__init__"
                found.append((node.lineno, rest))
    return found


def arrows() -> list[tuple[str, int, str, str, str]]:
    """(module, line, imported module, from part, to part) for every import between different parts."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        src = part_of(module)
        for line, target in imported_modules(path):
            dst = part_of(target)
            if dst != src:
                out.append((module, line, target, src, dst))
    return out


def test_every_module_belongs_to_a_part():
    for path in PACKAGE.rglob("*.py"):
        part_of(module_name(path))


def test_parts_import_only_what_design_allows():
    bad = []
    for module, line, target, src, dst in arrows():
        if dst == "shared":
            continue
        if src == "shared":
            bad.append(f"physattack/{module.replace('.', '/')}.py:{line} (shared) imports physattack.{target} "
                       f"({dst}): shared modules import only each other")
        elif dst not in ALLOWED[src] and (module, dst) not in KNOWN:
            bad.append(f"physattack/{module.replace('.', '/')}.py:{line} ({src}) imports physattack.{target} "
                       f"({dst}); {src} may import only {sorted(ALLOWED[src]) or 'shared modules'}")
    assert not bad, "imports against DESIGN.md's arrows:\n" + "\n".join(bad)


def test_known_exceptions_still_exist():
    """Each KNOWN entry is removed with the import it excuses."""
    present = {(module, dst) for module, _, _, _, dst in arrows()}
    assert not set(KNOWN) - present, f"remove from KNOWN: {sorted(set(KNOWN) - present)}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (node -> the nodes it imports) as the nodes along it, or None (depth-first)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_cycles_between_parts():
    graph: dict[str, set[str]] = {p: set() for p in PARTS}
    for _, _, _, src, dst in arrows():
        if "shared" not in (src, dst):
            graph[src].add(dst)
    if cycle := find_cycle(graph):
        pytest.fail("parts import each other in a cycle: " + " -> ".join(cycle))


def test_the_allowed_map_itself_has_no_cycle_and_names_only_parts():
    assert set(ALLOWED) == set(PARTS)
    for part, allowed in ALLOWED.items():
        assert allowed <= set(PARTS) - {part}
        reach, todo = set(), list(allowed)
        while todo:
            p = todo.pop()
            if p not in reach:
                reach.add(p)
                todo += ALLOWED[p]
        assert part not in reach, f"{part} may reach itself through {sorted(reach)}"


def test_no_cycles_between_modules_of_cli():
    """DESIGN.md: no import cycles between modules of ``cli/`` (function-level imports count too)."""
    modules = {module_name(path): path for path in sorted((PACKAGE / "cli").rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("physattack.cli"):
                base = node.module[len("physattack."):]
                edges |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
            elif isinstance(node, ast.Import):
                edges |= {a.name[len("physattack."):] for a in node.names if a.name.startswith("physattack.cli")}
        graph[module] = {e for e in edges if e in modules and e != module}
    if cycle := find_cycle(graph):
        pytest.fail("modules of cli/ import each other in a cycle: " + " -> ".join(cycle))
