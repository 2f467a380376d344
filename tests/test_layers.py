"""The packages' layers, enforced: pyproject.toml's import contracts (server's layers, the oracle importing
nothing from server/, the engine and the models knowing nothing of HTTP or the command line), no import cycle
between server's top-level packages, and every import left inside a function saying why it is there."""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]


def test_the_import_contracts_are_kept():
    """`lint-imports` over [tool.importlinter]: a broken contract fails with its name and the imports that
    break it."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    run = subprocess.run(
        [sys.executable, "-c", code, "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    report = run.stdout + run.stderr
    broken = report[report.find("Broken contracts") :] if "Broken contracts" in report else report[-4000:]
    assert run.returncode == 0, f"import contracts broken (pyproject.toml [tool.importlinter]):\n{broken}"
    assert "0 broken" in report, report[-2000:]


def test_no_import_cycle_between_servers_packages():
    """For every pair of server's top-level packages and modules, imports run one way at most (function-level
    and type-checking imports included)."""
    graph = grimp.build_graph("server", cache_dir=None)
    packages = sorted(graph.find_children("server"))
    cycles = []
    for a, b in itertools.combinations(packages, 2):
        there = graph.find_shortest_chain(importer=a, imported=b, as_packages=True)
        back = graph.find_shortest_chain(importer=b, imported=a, as_packages=True)
        if there and back:
            cycles.append(f"{a} <-> {b}: {' -> '.join(there)}; {' -> '.join(back)}")
    assert not cycles, "import cycles between server's packages:\n" + "\n".join(cycles)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Lines under `if TYPE_CHECKING:` (imports there never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                out.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return out


def _says_why(lines: list[str], lineno: int, import_lines: set[int]) -> bool:
    """Whether the import on `lineno` (1-based) has a `# deferred` comment on its line, or in the comment
    block above it or above the run of imports it ends."""
    if "# deferred" in lines[lineno - 1]:
        return True
    above = lineno - 1
    while above >= 1 and above in import_lines:
        above -= 1
    while above >= 1 and lines[above - 1].strip().startswith("#"):
        if lines[above - 1].strip().startswith("# deferred"):
            return True
        above -= 1
    return False


def test_every_import_inside_a_function_says_why():
    """An import that stays inside a function (start-up cost, mlx before blas.activate(), a cycle inside a
    package) carries a `# deferred: ...` comment on its line or just above it (or above the run of imports it
    belongs to): anything else belongs at the top of its module (ruff's PLC0415 lists the same sites)."""
    missing = []
    for path in sorted((REPO / "server").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        tree = ast.parse(source)
        skip = _type_checking_lines(tree)
        import_lines = {
            n
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
        }
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if (
                    isinstance(node, (ast.Import, ast.ImportFrom))
                    and node.lineno not in skip
                    and not _says_why(lines, node.lineno, import_lines)
                ):
                    missing.append((str(path.relative_to(REPO)), node.lineno, lines[node.lineno - 1].strip()))
    missing = sorted(set(missing))
    listed = "\n".join(f"{path}:{line}: {text}" for path, line, text in missing)
    assert not missing, (
        "imports inside functions without a `# deferred: <why>` comment (move each to the "
        f"top of its module, or say why it cannot go there):\n{listed}"
    )
