"""Issue 22: nothing the console's first frame does not need is imported before it.

The agent (its tools' gateway) is built after the first frame, as the engine starts; the MCP SDK (about a second
to import, pydantic and an HTTP client with it) when its hub first starts; the phone channels' aiohttp, apprise and
the webhook receiver when they start; and
`--version` and `status` load none of them. Each check runs in a fresh interpreter."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from console.config import Settings
from console.core import Store
from console.tui.app import ConsoleApp
from tests.support import pilot_until

ROOT = Path(__file__).resolve().parents[2]

# What the first frame may load beyond the standard library: Textual and what it draws with, SQLite, the
# settings' folders and local time zone (croniter, with dateutil and six, is imported when a cron is first read:
# a [digest_cron] setting, or the engine installing its timers). `certifi` and the `_distutils_hack` /
# editable-install finders come from the interpreter's site-packages start-up, before any of our code.
FIRST_FRAME_ALLOWED = {
    "console", "textual", "rich", "typing_extensions",
    "platformdirs", "apsw", "tzlocal", "tzdata",
    "textual_speedups",  # Textual's own, where installed
    "certifi", "_distutils_hack", "__editable___agent_console_0_1_0_finder", "__main__", "tests",
    "_sysconfigdata__linux_x86_64-linux-gnu",
}
# Nor, of ours, the standard library's and Textual's, what only a screen or a part the first frame does not show
# uses: the modal screens and the palette's commands (each imported when first opened); TextArea and the syntax
# highlighting of the inject and detail screens (pygments, with importlib.metadata for its plugins), Markdown; the
# agent's tools (the offline agent's among them); the phone and mail channels and what they send with (urllib's
# opener, http.client, the email package, smtplib), loaded when such a channel is configured.
NOT_BEFORE_FIRST_FRAME = ("console.tui.screens", "console.tui.commands", "textual.widgets._text_area",
                          "textual.highlight", "textual.document", "textual.widgets._markdown", "pygments",
                          "markdown_it", "tree_sitter", "importlib.metadata", "console.agents.offline",
                          "console.agents.gateway", "console.edges.phone", "console.edges.phone_config",
                          "console.edges.mailsource", "urllib.request", "http.client", "email", "smtplib")
SHOW_MODULES = "import json, sys; print(json.dumps(sorted(sys.modules)))"
HEAVY = {"mcp", "mcp_types", "aiohttp", "apprise", "pydantic", "pydantic_core", "anyio", "httpx2", "jsonschema",
         "anthropic", "psycopg", "starlette", "uvicorn"}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def third_party(modules: list[str]) -> set[str]:
    """The top-level names of the modules outside the standard library (the editable finder's name
    changes with the installed version, so any of its names counts as the one)."""
    tops = {name.split(".")[0] for name in modules} - set(sys.stdlib_module_names)
    return {("__editable___agent_console_0_1_0_finder" if top.startswith("__editable___") else top)
            for top in tops}


# The main screen is the first frame (its package's __init__ comes with it).
FIRST_FRAME_SCREENS = {"console.tui.screens", "console.tui.screens.main"}


def deferred(modules: list[str]) -> list[str]:
    """Those of the modules the first frame must not have waited for (NOT_BEFORE_FIRST_FRAME)."""
    return [name for name in modules if name not in FIRST_FRAME_SCREENS
            and any(name == package or name.startswith(f"{package}.") for package in NOT_BEFORE_FIRST_FRAME)]


def loaded_by(code: str) -> tuple[list[str], str]:
    """The modules loaded once `code` has run in a fresh interpreter (its sys.modules at exit), and
    `python -X importtime`'s report of what each cost (to read when the test fails)."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"{code}\n{SHOW_MODULES}"],
                          capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def imported_by(code: str) -> tuple[set[str], str]:
    """The top-level modules outside the standard library loaded once `code` has run, and the importtime report."""
    modules, report = loaded_by(code)
    return third_party(modules), report


def costliest(report: str, names: set[str]) -> str:
    """The importtime lines of these top-level modules, for a failure's message."""
    lines = [line for line in report.splitlines()
             if (m := re.match(r"import time:\s+\d+ \|\s+\d+ \| (\s*)(\S+)$", line)) and m.group(2) in names]
    return "\n".join(lines)


def test_importing_the_console_loads_only_what_the_first_frame_needs() -> None:
    modules, report = loaded_by("import console.tui.app")
    unexpected = third_party(modules) - FIRST_FRAME_ALLOWED
    assert unexpected == set(), costliest(report, unexpected)
    assert deferred(modules) == [], costliest(report, set(deferred(modules)))


def test_the_first_frame_is_drawn_before_the_agent_channels_and_receiver_are_imported() -> None:
    done = subprocess.run([sys.executable, "-m", "tests.tui.start_probe"], capture_output=True, text=True,
                          env=_env(), cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["rows_drawn"], "the events pane had not drawn its first page when the engine started"
    assert third_party(seen["first_frame"]) - FIRST_FRAME_ALLOWED == set()
    assert deferred(seen["first_frame"]) == []
    # Then the engine builds the agent as it starts (the built-in agent's tools come through the MCP hub); the
    # MCP SDK itself is loaded when the hub first starts, i.e. when a run first needs a tool.
    assert seen["start_error"] is None
    assert "console.agents.registry" in seen["started"] and "console.agents.mcp" in seen["started"]
    assert "mcp" not in third_party(seen["started"])


@pytest.mark.parametrize("command", ["--version", "status"])
def test_version_and_status_load_none_of_the_heavy_libraries(command: str, tmp_path: Path) -> None:
    Store.open(tmp_path / "inbox.db").close()
    argv = ["agent-console", "--db", str(tmp_path / "inbox.db"), command]
    modules, report = loaded_by(f"import sys\nfrom console.cli import main\nsys.argv = {argv!r}\n"
                                "try:\n    main()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code")
    heavy = third_party(modules) & (HEAVY | {"textual"})
    assert heavy == set(), costliest(report, heavy)
    # nor the phone channels' modules, which the telegram commands load when they run (not to be registered)
    assert deferred(modules) == [], costliest(report, set(deferred(modules)))


async def test_an_agent_that_cannot_be_built_stops_the_console_as_it_starts(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent is built after the first frame; its setup error still ends the console with its one line."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    app = ConsoleApp(Settings(db=tmp_path / "inbox.db", agent="claude"), install_defaults=False,
                     state_path=tmp_path / "state.json")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(pilot, lambda: app.start_error is not None, "the start error")
    assert app.start_error is not None and "ANTHROPIC_API_KEY" in app.start_error
    assert app.return_code == 2


class WatchedConsole(ConsoleApp):
    """The console, noting whether the garbage collector ran while its panes were composed and first read."""

    CSS_PATH = Path(sys.modules[ConsoleApp.__module__].__file__ or "").with_name("app.tcss")
    collecting_at_mount: bool | None = None

    async def on_mount(self) -> None:
        self.collecting_at_mount = gc.isenabled()
        await super().on_mount()


async def test_the_garbage_collector_is_held_off_until_the_first_frame_then_runs_again(tmp_path: Path) -> None:
    assert gc.isenabled()
    app = WatchedConsole(Settings(db=tmp_path / "inbox.db"), install_defaults=False,
                         state_path=tmp_path / "state.json")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(pilot, lambda: app.started, "the engine to start after the first frame")
        assert app.collecting_at_mount is False
        assert gc.isenabled()
    assert gc.isenabled()


def test_the_keys_of_screens_not_yet_opened_are_known() -> None:
    """The screens are imported when first opened; the help screen, the palette and the [keys] checks still
    know every screen's keys in a console that has opened none (a fresh interpreter: nothing else imported them)."""
    code = ("import json, sys\nfrom console.tui.keys import binding_ids, key_rows, unknown_key_ids\n"
            "screens_before = sorted(m for m in sys.modules if m.startswith('console.tui.screens.'))\n"
            "ids = binding_ids()\n"
            "print(json.dumps({'before': screens_before, 'ids': sorted(ids), 'places': sorted({r.place for r in "
            "key_rows({})}), 'problems': unknown_key_ids({'approval.yes': 'Y', 'budget.save': 'ctrl+w'}, ids)}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["before"] == []
    assert {"approval.yes", "budget.save"} <= set(seen["ids"])
    assert {"An event's detail", "Search (/) and outbox messages (o)", "The inject form (i)",
            "This help"} <= set(seen["places"])
    assert seen["problems"] == []
