"""The project's own rules, checked where CI can see them: ruff, mypy --strict on console/, and the layering
(the core never imports Textual, nor does anything outside the console's tui/; SQL lives only in the core)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSOLE = ROOT / "console"
SQL = re.compile(
    r"\b(SELECT\b[\s\S]+?\bFROM|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)|"
    r"PRAGMA\s+\w+|BEGIN\s+IMMEDIATE)\b"
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_is_clean() -> None:
    result = run("ruff", "check", "--no-cache", "console", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean_on_the_package() -> None:
    result = run("mypy", "--strict", "console")
    assert result.returncode == 0, result.stdout + result.stderr


def modules_outside_the_core() -> list[Path]:
    return [path for path in sorted(CONSOLE.rglob("*.py")) if path.relative_to(CONSOLE).parts[0] != "core"]


def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_only_the_console_imports_textual() -> None:
    offenders = [
        str(path.relative_to(ROOT)) for path in sorted(CONSOLE.rglob("*.py"))
        if path.relative_to(CONSOLE).parts[0] != "tui"
        and any(name == "textual" or name.startswith("textual.") for name in imported(parsed(path)))
    ]
    assert offenders == []


def test_sql_lives_only_in_the_core() -> None:
    offenders: list[str] = []
    for path in modules_outside_the_core():
        tree = parsed(path)
        docstrings = {
            id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                if SQL.search(node.value):
                    offenders.append(f"{where} SQL text {node.value[:40]!r}")
            elif isinstance(node, ast.Attribute) and node.attr in ("execute", "executemany"):
                offenders.append(f"{where} calls .{node.attr}()")
    assert offenders == []


def test_the_rules_catch_what_they_look_for() -> None:
    """The checks above are not vacuous: they flag a planted offence."""
    tree = ast.parse('conn.execute("SELECT id FROM inbox")\nimport textual.app\n')
    assert any(isinstance(n, ast.Attribute) and n.attr == "execute" for n in ast.walk(tree))
    assert SQL.search("SELECT id FROM inbox") and SQL.search("UPDATE inbox SET x = 1")
    assert not SQL.search("select the event you want from the list")
    assert "textual.app" in imported(tree)
