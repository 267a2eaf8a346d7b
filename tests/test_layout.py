"""The package's shape: imports point one way, and the plugin module is hooks and the fixture only."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_palette"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py") if "skills" not in p.relative_to(PACKAGE).parts}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every module of the package this one imports: at the top, in functions, under TYPE_CHECKING alike."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:  # `from . import stats` names a module; `from .x import f` a name in x
                if f"{target}.{alias.name}" in known:
                    found.add(f"{target}.{alias.name}")
                elif target in known:
                    found.add(target)
    return found - {name}


def graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def test_no_module_of_the_package_imports_itself_back() -> None:
    edges = graph()
    assert len(edges) > 50 and "pytest_palette.run.items" in edges["pytest_palette.plugin"]  # the graph is real
    try:
        order = list(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as error:
        raise AssertionError(f"import cycle: {' → '.join(error.args[1])}") from None
    assert set(order) == set(edges)


def test_the_results_side_knows_nothing_of_the_run_side_or_the_hosts() -> None:
    for name, imported in graph().items():
        if name.startswith("pytest_palette.results"):
            outside = {m for m in imported if m.startswith(("pytest_palette.run", "pytest_palette.hosts",
                                                            "pytest_palette.commands", "pytest_palette.plugin"))}
            assert not outside, f"{name} imports {sorted(outside)}"


def reached_from(name: str, edges: dict[str, set[str]]) -> set[str]:
    """Every module of the package that importing `name` imports, directly or through others."""
    reached, todo = set(), [name]
    while todo:
        for imported in edges[todo.pop()] - reached:
            reached.add(imported)
            todo.append(imported)
    return reached


def test_hosts_build_on_where_the_agent_acts_and_the_run_on_both() -> None:
    # One way: run → hosts → arena. A host that reached run/ (even through another module) would tie every host
    # to how a pytest session runs items; arena is the floor both stand on.
    edges = graph()
    assert "pytest_palette.arena.sandbox" in edges["pytest_palette.hosts.shell"]  # the graph sees the floor
    for name in edges:
        if name.startswith(("pytest_palette.hosts", "pytest_palette.arena")):
            above = ("pytest_palette.run", "pytest_palette.hosts") if name.startswith("pytest_palette.arena") \
                else ("pytest_palette.run",)
            reached = {m for m in reached_from(name, edges) if m.startswith(above)}
            assert not reached, f"{name} reaches {sorted(reached)}"


def test_only_the_commands_the_plugin_and_its_options_reach_the_site() -> None:
    # The site reads runs; nothing that makes a run may need it (or Jinja2).
    for name, imported in graph().items():
        if name.startswith("pytest_palette.site"):
            continue
        reached = {m for m in imported if m.startswith("pytest_palette.site")}
        allowed = name.startswith("pytest_palette.commands") or name == "pytest_palette.plugin" or \
            (name == "pytest_palette.options" and reached <= {"pytest_palette.site.folder"})
        assert not reached or allowed, f"{name} imports {sorted(reached)}"


def test_the_plugin_module_holds_hooks_and_the_fixture_only() -> None:
    tree = ast.parse((PACKAGE / "plugin.py").read_text(encoding="utf-8"))
    body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) else tree.body  # its docstring
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        assert isinstance(node, ast.FunctionDef), f"line {node.lineno}: not a hook ({type(node).__name__})"
        fixture = any("fixture" in ast.unparse(d) for d in node.decorator_list)
        assert node.name.startswith("pytest_") or fixture, f"line {node.lineno}: {node.name} is neither"
        assert len(node.body) <= 8, f"{node.name} does work itself: {len(node.body)} statements"


def test_the_package_reads_as_its_parts() -> None:
    top = sorted(p.name for p in PACKAGE.iterdir() if not p.name.startswith("__pycache__"))
    groups = {"run", "arena", "results", "hosts", "rehearsal", "engine", "commands", "skills", "site"}
    assert groups <= set(top)
    loose = [name for name in top if name.endswith(".py") and name != "__init__.py"]
    assert len(loose) <= 10, loose


def test_families_stand_on_the_arena_and_the_results_side_only() -> None:
    # A family's grading is used by the grade command now and by the run side next: it must reach neither.
    edges = graph()
    assert "pytest_palette.arena.sandbox" in edges["pytest_palette.families.hooks"]  # the graph sees them
    for name, imported in edges.items():
        if name.startswith("pytest_palette.families"):
            above = {m for m in imported if m.startswith(("pytest_palette.run", "pytest_palette.hosts",
                                                          "pytest_palette.commands", "pytest_palette.plugin",
                                                          "pytest_palette.site", "pytest_palette.rehearsal"))}
            assert not above, f"{name} imports {sorted(above)}"


def test_the_judge_reads_an_items_folder_and_never_the_run() -> None:
    # The judge owns what it reads (judge/evidence.py): it, and a skill's rules, reach nothing of the run, the
    # hosts, the commands or the site, so a saved folder is judged the same way by any caller.
    edges = graph()
    assert "pytest_palette.judge.evidence" in edges["pytest_palette.judge.palette"]  # the graph sees it
    for name in edges:
        if name.startswith("pytest_palette.judge") or name == "pytest_palette.rules":
            reached = {m for m in reached_from(name, edges) if m.startswith((
                "pytest_palette.run", "pytest_palette.hosts", "pytest_palette.commands", "pytest_palette.plugin",
                "pytest_palette.site", "pytest_palette.layer", "pytest_palette.rehearsal"))}
            assert not reached, f"{name} reaches {sorted(reached)}"
