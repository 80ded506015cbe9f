"""The project's own rules, checked where CI can see them: ruff, mypy --strict on console/, and the layering:
which room may import which (docs/architecture.md has the map), the core never imports Textual, nor does
anything outside the console's tui/, `agent-console run` never loads Textual, and SQL lives only in the core."""

from __future__ import annotations

import ast
import functools
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.helpers import isolated_env
from tests.support import wait_until

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


@functools.cache  # eight rules read the same ~130 files: each is parsed once a run (no rule changes a tree)
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


def test_only_the_telemetry_leaf_imports_opentelemetry() -> None:
    """The runtime and the agents call console/telemetry's few functions, never the SDK: it stays a no-op
    when off and loads lazily when on."""
    offenders = []
    for path in sorted((ROOT / "console").rglob("*.py")):
        tree = parsed(path)
        if not within(module_name(path), "console.telemetry") and any(within(name, "opentelemetry")
                                                                     for name in imported(tree)):
            offenders.append(str(path.relative_to(ROOT)))
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


# The SQLite backend's own modules, and the opener that picks it (and the core package that re-exports the Store).
SQLITE_BACKEND = {"console.core.db", "console.core.sqlite", "console.core.walfeed", "console.core.store",
                  "console.core"}


def sqlite_driver_users(modules: dict[str, Path]) -> list[str]:
    """Modules (by name) outside the SQLite backend that import apsw or its module (core/db.py)."""
    return [name for name, path in modules.items() if name not in SQLITE_BACKEND
            and any(within(used, "apsw") or within(used, "console.core.db") for used in imported(parsed(path)))]


def test_no_backend_neutral_module_imports_the_sqlite_driver(tmp_path: Path) -> None:
    """The store's errors are core/errors.py's, the checks' bounds core/gate.py's: the neutral modules (the Store's
    mixins, the backend protocol, PostgreSQL's backend, the runtime, the edges, the CLI) import neither apsw nor
    core/db.py."""
    assert sqlite_driver_users({module_name(path): path for path in sorted(CONSOLE.rglob("*.py"))}) == []
    planted = tmp_path / "planted.py"
    planted.write_text("from console.core.db import StoreError\n")
    assert sqlite_driver_users({"console.core.planted": planted, "console.core.db": planted}) == [
        "console.core.planted"]


def backend_tests(tree: ast.Module) -> list[int]:
    """Lines that test which backend an inbox is on by name (is_postgres, _is_postgres, ...)."""
    return [node.lineno for node in ast.walk(tree)
            if (isinstance(node, ast.Name) and "is_postgres" in node.id)
            or (isinstance(node, ast.Attribute) and "is_postgres" in node.attr)
            or (isinstance(node, ast.FunctionDef) and "is_postgres" in node.name)
            or (isinstance(node, ast.alias) and "is_postgres" in node.name)]


def test_the_backend_is_chosen_only_by_the_opener() -> None:
    """console/core/store.py reads a target as a file or a server and opens it (inbox_location, settled_location,
    open_backend); the settings and the command line ask it, never test the text themselves."""
    testers = {module_name(path) for path in sorted(CONSOLE.rglob("*.py")) if backend_tests(parsed(path))}
    assert testers == {"console.core.store"}
    assert backend_tests(ast.parse("from console.core.pg_target import is_postgres\nif is_postgres(db): pass")) == [
        1, 2]


def store_openers(tree: ast.Module) -> int:
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Attribute) and node.attr == "open"
               and isinstance(node.value, ast.Name) and node.value.id == "Store")


def test_settings_become_an_open_inbox_in_one_place() -> None:
    """open_inbox(settings) (config.py) is how the commands, the engine's connections, the webhook receiver's
    writer and the console open the inbox."""
    openers = {module_name(path): n for path in modules_outside_the_core() if (n := store_openers(parsed(path)))}
    assert openers == {"console.config": 1}
    assert store_openers(ast.parse("Store.open(settings.db, options=settings.store_options())")) == 1


def signal_handlers(tree: ast.Module) -> int:
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.Attribute)
               and (node.attr == "add_signal_handler" or (node.attr == "signal" and isinstance(node.value, ast.Name)
                                                          and node.value.id == "signal")))


def test_one_signal_handler_stops_every_shape() -> None:
    """`run`, `serve` and the console stop on the same signals through console/assembly.on_stop_signals."""
    installers = {module_name(path): n for path in sorted(CONSOLE.rglob("*.py"))
                  if (n := signal_handlers(parsed(path)))}
    assert installers == {"console.assembly": 1}
    planted = ast.parse("loop.add_signal_handler(signal.SIGTERM, stop)\nsignal.signal(signal.SIGHUP, quit)")
    assert signal_handlers(planted) == 2


def private_names(paths: list[Path]) -> set[str]:
    """The _names the modules define: classes and functions, and what they assign (attributes and names)."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.attr if isinstance(node, ast.Attribute) else node.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def textual_privates_used(paths: list[Path], ours: set[str]) -> list[str]:
    """Where these modules reach a private name of Textual's (one Textual defines and the console does not)."""
    import textual

    theirs = private_names(sorted(Path(textual.__file__).parent.rglob("*.py"))) - ours
    return [f"{path.name}:{node.lineno} {node.attr}" for path in paths for node in ast.walk(parsed(path))
            if isinstance(node, ast.Attribute) and node.attr in theirs]


def textual_compat_modules() -> list[Path]:
    return sorted((CONSOLE / "tui").glob("textual_*.py"))


def private_textual_imports(paths: list[Path]) -> list[str]:
    """Where these modules import a private module or name of Textual's (`textual.widgets._footer`, say)."""
    found = []
    for path in paths:
        for node in ast.walk(parsed(path)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and within(node.module.split(".")[0], "textual"):
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            private = [name for name in names if within(name.split(".")[0], "textual")
                       and any(part.startswith("_") for part in name.split("."))]
            if private:
                found.append(f"{path.name}:{node.lineno} {private[0]}")
    return found


def test_private_textual_names_live_in_one_module_named_for_its_version(tmp_path: Path) -> None:
    """A module that reaches Textual's private names (DataTable._clear_caches, textual.widgets._footer) breaks
    silently on a Textual upgrade. The few the console needs (no public way in Textual 8) are in one module,
    console/tui/textual_<major>_<minor>.py, named for the Textual they were checked against: an upgrade fails here
    until they are checked again and the module renamed. Everything else uses the public API, imports and
    attributes alike."""
    import textual

    compat = textual_compat_modules()
    installed = ".".join(textual.__version__.split(".")[:2])
    assert [path.name for path in compat] == [f"textual_{installed.replace('.', '_')}.py"]
    others = [path for path in sorted(CONSOLE.rglob("*.py")) if path not in compat]
    ours = private_names(others)
    assert textual_privates_used(others, ours) == []
    assert private_textual_imports(others) == []
    planted = tmp_path / "planted.py"
    planted.write_text("from textual.widgets._footer import FooterKey\nclass Table(DataTable):\n"
                       "    def grow(self) -> None:\n        self._clear_caches()\n")
    assert textual_privates_used([planted], ours) == ["planted.py:4 _clear_caches"]
    assert private_textual_imports([planted]) == ["planted.py:1 textual.widgets._footer"]


def test_the_rules_catch_what_they_look_for() -> None:
    """The checks above are not vacuous: they flag a planted offence."""
    tree = ast.parse('conn.execute("SELECT id FROM inbox")\nimport textual.app\n')
    assert any(isinstance(n, ast.Attribute) and n.attr == "execute" for n in ast.walk(tree))
    assert SQL.search("SELECT id FROM inbox") and SQL.search("UPDATE inbox SET x = 1")
    assert not SQL.search("select the event you want from the list")
    assert "textual.app" in imported(tree)


# --- rooms: who may import whom ------------------------------------------------------------------
# Modules everyone may use: small, and they import nothing of the rooms above them.
LEAVES = ("console.clock", "console.futures", "console.notices", "console.redact", "console.textsafe",
          "console.timefmt", "console.spendfmt", "console.trust.callview", "console.pricing", "console.telemetry",
          "console.modelspec")
# Each room, and the console modules it may import (a prefix allows the modules under it). First match wins.
ROOMS: list[tuple[str, tuple[str, ...]]] = [
    ("console.core", ("console.core",)),
    ("console.clock", ()),
    ("console.futures", ()),
    ("console.notices", ()),
    ("console.redact", ()),
    ("console.textsafe", ()),
    ("console.timefmt", ()),
    ("console.pricing", ()),
    ("console.modelspec", ("console.pricing",)),
    ("console.spendfmt", ("console.core",)),
    # The room for trust: pure rules and what the owner sees of them; the call view is everyone's (a leaf).
    ("console.trust.callview", ("console.textsafe",)),
    ("console.trust", ("console.core", "console.config", "console.trust", *LEAVES)),
    ("console.telemetry", ()),
    ("console.examples", ()),
    # The settings check an agent's name against a constant, never the agents' registry (prices are a leaf).
    ("console.config", ("console.core", *LEAVES)),
    ("console.demo", ("console.core", "console.config", *LEAVES)),
    ("console.agents", ("console.core", "console.config", "console.agents", "console.trust", *LEAVES)),
    ("console.edges", ("console.core", "console.config", "console.edges", *LEAVES)),
    # The composition root: the one module that wires agents, channels and the engine together.
    ("console.assembly", ("console.core", "console.config", "console.agents", "console.edges",
                                  "console.runtime", *LEAVES)),
    # The services run an agent through its protocol; they never build one, nor touch the outside. They see the
    # engine through runtime/host.py only (nothing imports the engine back but the assembly).
    ("console.runtime", ("console.core", "console.config", "console.agents.base", "console.agents.errors",
                         "console.runtime.dbthread", "console.runtime.host", "console.runtime.worker",
                         "console.runtime.scheduler", "console.runtime.dispatcher", "console.runtime.maintenance",
                         *LEAVES)),
    # "Why hasn't this run?" (runtime/why.py) is a pure reading of the store both the console and `show` print.
    ("console.tui", ("console.core", "console.config", "console.demo", "console.tui", "console.assembly",
                     "console.runtime.why", "console.edges.receiver", *LEAVES)),
    # The CLI builds an engine only through the assembly, and loads the console by name (importlib) when it is
    # opened, so `run` never imports Textual.
    ("console.cli", ("console.core", "console.config", "console.assembly", "console.runtime.why",
                     "console.cli_common", "console.cli_render", "console.cli_telegram", "console.cli_schedules",
                     "console.trust.audit", *LEAVES)),
    # What the commands print: pure renderings of what a command read.
    ("console.cli_render", ("console.core", "console.config", "console.cli_telegram", *LEAVES)),
    # What the command modules share (the group's state, the one-line error, the value types, the output helpers).
    ("console.cli_common", ("console.core", "console.config", *LEAVES)),
    # `agent-console telegram ...`: the chat source's commands, registered on the CLI's group; it uses the shared
    # helpers, never the group's module (which imports it: that was an import circle).
    ("console.cli_telegram", ("console.core", "console.cli_common", "console.config", "console.edges.phone_config",
                              "console.edges.telegram", "console.edges.telegram_webhook")),
    # `agent-console schedules ...`: the agent's schedules, seen and steered by the owner, registered on the group.
    ("console.cli_schedules", ("console.core", "console.cli_common", "console.config", *LEAVES)),
    ("console.__main__", ("console.cli",)),
]


# Rooms whose modules may not import each other freely: the allowed ones are named in the table.
NAMED_WITHIN = {"console.runtime"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def room_of(module: str) -> tuple[str, tuple[str, ...]]:
    if module == "console":  # the package itself: its version string
        return module, ()
    for room, allowed in ROOMS:
        if within(module, room):
            return room, allowed
    raise AssertionError(f"{module} is in no room: add it to ROOMS and to docs/architecture.md")


def broken_rules(module: str, tree: ast.Module) -> list[str]:
    room, allowed = room_of(module)
    wrong: list[str] = []
    for name in sorted(imported(tree)):
        if not within(name, "console") or within(name, module) or name == "console":  # the package: its version
            continue
        own_room = () if room in NAMED_WITHIN else (room,)
        if not any(within(name, prefix) for prefix in (*own_room, *allowed)):
            wrong.append(f"{module} ({room}) imports {name}")
    return wrong


def test_every_room_imports_only_what_its_rule_allows() -> None:
    offenders = [line for path in sorted(CONSOLE.rglob("*.py")) for line in broken_rules(module_name(path),
                                                                                         parsed(path))]
    assert offenders == []


# --- import circles ----------------------------------------------------------------------------------
def import_graph(*, when_loaded: bool) -> dict[str, set[str]]:
    """Each console module and the console modules it imports (`from package import module` names the module).
    when_loaded: only what runs as the module loads (not under TYPE_CHECKING, not inside a function or method).
    A module importing its own package is not counted: the package has loaded first."""
    modules = {module_name(path): path for path in CONSOLE.rglob("*.py")}

    def imports(body: list[ast.stmt], *, top: bool, typing_only: bool, found: set[str]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                if when_loaded and (not top or typing_only):
                    continue
                named = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
                    [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)] if node.module else [])
                found |= {name for name in named if name in modules}
            elif isinstance(node, ast.If):
                typing_block = "TYPE_CHECKING" in ast.unparse(node.test)
                imports(node.body, top=top, typing_only=typing_only or typing_block, found=found)
                imports(node.orelse, top=top, typing_only=typing_only, found=found)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                imports(node.body, top=top and isinstance(node, ast.ClassDef), typing_only=typing_only, found=found)
            else:  # with, try, for, while: their statements run as the module loads, as the module's own do
                for field in ("body", "orelse", "finalbody"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        imports(inner, top=top, typing_only=typing_only, found=found)
                for handler in getattr(node, "handlers", []):
                    imports(handler.body, top=top, typing_only=typing_only, found=found)

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        found: set[str] = set()
        imports(parsed(path).body, top=True, typing_only=False, found=found)
        graph[module] = {name for name in found if name != module and not within(module, name)}
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected sets of two or more modules (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_is_in_an_import_circle() -> None:
    """None as the modules load; counting the imports made late (inside a function) or for types only, the one
    left is the palette provider's type-only import of the app (tui/commands.py), and the core's store and its
    backend's (issue 19 item 4 takes those apart)."""
    assert circles(import_graph(when_loaded=True)) == []
    allowed = {"console.tui.app", "console.tui.commands"}
    left = [circle for circle in circles(import_graph(when_loaded=False)) if circle != allowed]
    assert left == []


def test_the_circle_finder_finds_a_planted_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_engine_imports_neither_edges_nor_agents_it_runs() -> None:
    names = imported(parsed(CONSOLE / "runtime" / "engine.py"))
    assert not [n for n in names if within(n, "console.edges") or within(n, "console.agents.registry")
                or within(n, "console.agents.offline") or within(n, "console.agents.claude")]


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("console.edges.phone", "from console.runtime.engine import Engine"),
        ("console.config", "from console.agents.registry import AGENTS"),
        ("console.core.inbox", "import console.runtime"),
        ("console.runtime.worker", "from console.agents.registry import build_agent"),
        ("console.runtime.scheduler", "from console.runtime.engine import Engine"),
        ("console.runtime.engine", "from console.edges.channels import build_channels"),
        ("console.runtime.engine", "from console.assembly import build_engine"),
        ("console.edges.receiver", "from console.assembly import System"),
        ("console.agents.claude", "from console.tui.app import ConsoleApp"),
        ("console.cli", "from console.tui.app import run_app"),
        ("console.cli", "from console.runtime.engine import Engine"),
        ("console.tui.app", "from console.runtime.engine import Engine"),
        ("console.cli_telegram", "from console.cli import CliState"),
        ("console.cli_common", "from console.cli import main"),
    ],
)
def test_the_room_table_catches_a_planted_import(module: str, source: str) -> None:
    assert broken_rules(module, ast.parse(source)) != []


def test_the_room_table_lets_the_allowed_imports_through() -> None:
    wiring = ast.parse("from console.edges.channels import build_channels")
    assert broken_rules("console.assembly", wiring) == []
    assert broken_rules("console.edges.writer", ast.parse("from console.futures import settle_future")) == []


def test_run_never_loads_textual(tmp_path: Path) -> None:
    """The headless engine, as a real process, up and holding the lease: no Textual module was imported
    (-X importtime lists every import on stderr, with its full name)."""
    env = isolated_env(tmp_path / "home", AGENT_CONSOLE_LEASE_TTL="5")
    log = tmp_path / "run.log"
    with log.open("w") as handle:
        process = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "console", "--db",
                                    str(tmp_path / "inbox.db"), "run"], cwd=ROOT, env=env,
                                   stdout=subprocess.DEVNULL, stderr=handle)
        try:
            wait_until(lambda: process.poll() is not None or "mode: active" in log.read_text(),
                       "`agent-console run` to hold the lease", limit=60)
            assert process.poll() is None, log.read_text()
            subprocess.run([sys.executable, "-m", "console", "--db", str(tmp_path / "inbox.db"), "ingest", "chat",
                            "c1", '{"text": "hello"}'], cwd=ROOT, env=env, check=True, capture_output=True)
            wait_until(lambda: "run 1 done" in log.read_text(), "the engine to run an event", limit=60)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    imports = [line.rsplit("|", 1)[-1].strip() for line in log.read_text().splitlines()
               if line.startswith("import time:")]
    assert "console.runtime.engine" in imports  # the listing is real: it names what run did import
    assert [name for name in imports if within(name, "textual")] == []


def test_docs_and_bench_usage_lines_name_no_machines_paths() -> None:
    """Usage lines say plain `python`; no one machine's virtual environment or work folder."""
    machine_path = re.compile(r"(/work/|/home/\w+/|venv[^\s]*/bin/python)")
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.py"))]
    offenders = [f"{path.relative_to(ROOT)}:{number}" for path in texts
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if machine_path.search(line)]
    assert offenders == []
    assert machine_path.search("    /work/venv/bin/python bench/store_bench.py --quick")


def test_the_console_app_stays_small() -> None:
    """Issue 32: the main screen's keys and actions live on MainScreen; ConsoleApp keeps the engine's frame (at most
    550 lines from its class line to its last)."""
    tree = ast.parse((CONSOLE / "tui" / "app.py").read_text(encoding="utf-8"))
    app = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ConsoleApp")
    assert app.end_lineno is not None and app.end_lineno - app.lineno + 1 <= 550
