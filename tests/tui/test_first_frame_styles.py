"""Issue 22: the work Textual's CSS does before the console's first frame.

Each widget is styled as it mounts, and the whole screen once more as it is first shown; before, the first resize
set the screen's breakpoint classes (-wide, -tall) after that and every widget was styled a third time, and each
footer key was styled again when Textual's compact footer added its "-compact" class to it after mounting."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.css.stylesheet import Stylesheet
from textual.dom import DOMNode
from textual.widgets import Footer

from console.config import Settings
from console.tui.app import ConsoleApp
from tests.support import pilot_until


@pytest.fixture
def stylings(monkeypatch: pytest.MonkeyPatch) -> Iterator[collections.Counter[int]]:
    """How many times each node was styled (Textual's Stylesheet.apply, counted and then run as it is; the
    component classes' own nodes left out)."""
    counts: collections.Counter[int] = collections.Counter()
    apply = Stylesheet.apply

    def counted(self: Stylesheet, node: DOMNode, *args: Any, **kwargs: Any) -> None:
        if type(node) is not DOMNode:
            counts[id(node)] += 1
        apply(self, node, *args, **kwargs)

    monkeypatch.setattr(Stylesheet, "apply", counted)
    yield counts


async def test_the_first_frame_styles_each_widget_about_once_more_than_it_mounts(
        tmp_path: Path, stylings: collections.Counter[int]) -> None:
    app = ConsoleApp(Settings(db=tmp_path / "inbox.db"), install_defaults=False, state_path=tmp_path / "state.json")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(pilot, lambda: app.started, "the engine to start after the first frame")
        nodes = len(stylings)
        assert nodes > 40  # the header, four panes, the footer's keys
        # Every widget styled as it mounts and once as the screen is shown at most: 159 stylings of 62 widgets before
        # (the breakpoint classes and the footer keys' class came after), 97 now.
        assert sum(stylings.values()) <= 2 * nodes, collections.Counter(stylings.values())
        assert app.screen.has_class("-wide") and app.screen.has_class("-tall")
        footer = app.query_one(Footer)
        assert footer.compact and footer.query("FooterKey")
        assert all(key.has_class("-compact") for key in footer.query("FooterKey"))


async def test_the_breakpoint_classes_follow_the_terminal_from_the_start(tmp_path: Path) -> None:
    app = ConsoleApp(Settings(db=tmp_path / "inbox.db"), install_defaults=False, state_path=tmp_path / "state.json")
    async with app.run_test(size=(80, 16)) as pilot:
        assert app.screen.has_class("-narrow") and app.screen.has_class("-short")
        assert not app.screen.has_class("-wide") and not app.screen.has_class("-tall")
        await pilot.resize_terminal(120, 40)
        await pilot_until(pilot, lambda: app.screen.has_class("-wide"), "the wide class after a resize")
        assert app.screen.has_class("-tall") and not app.screen.has_class("-narrow")
