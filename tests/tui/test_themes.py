"""Theme files: the shipped ones load, a broken one is one notification, the choice is remembered."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.clock import ManualClock
from console.tui.theme_files import SHIPPED, load_themes, parse_theme
from tests.support import pilot_until
from tests.tui.scenes import make_app


def test_shipped_themes_load_from_package_data(tmp_path: Path) -> None:
    loaded = load_themes(tmp_path / "no-such-folder")
    assert loaded.errors == []
    assert sorted(t.name for t in loaded.themes) == sorted(SHIPPED)
    light = next(t for t in loaded.themes if t.name == "agent-light")
    assert light.dark is False and light.variables["status-dead"] == "#B3261E"


def test_top_level_themes_folder_is_the_shipped_folder() -> None:
    root = Path(__file__).resolve().parents[2]
    assert sorted(p.name for p in (root / "themes").glob("*.toml")) == sorted(f"{n}.toml" for n in SHIPPED)


@pytest.mark.parametrize(("text", "problem"), [
    ("name = 'x'\nprimary = 'not-a-colour'", "is not a colour"),
    ("name = 'x'", "'primary' colour is required"),
    ("primary = '#000000'\nsparkle = true", "unknown setting sparkle"),
    ("primary = [", "not valid TOML"),
    ("primary = '#000000'\ndark = 'yes'", "dark must be a bool"),
])
def test_a_bad_theme_file_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_theme(text, "mine.toml")


def test_user_theme_folder_adds_themes_and_skips_broken_ones(tmp_path: Path) -> None:
    (tmp_path / "sunset.toml").write_text("primary = '#FF8800'\nbackground = '#201010'\n")
    (tmp_path / "broken.toml").write_text("primary = ")
    loaded = load_themes(tmp_path)
    assert "sunset" in {t.name for t in loaded.themes}
    assert len(loaded.errors) == 1 and "broken.toml" in loaded.errors[0]


async def test_broken_user_theme_gives_one_notification_and_the_default(filled: Path, clock: ManualClock,
                                                                         tmp_path: Path) -> None:
    themes = tmp_path / "themes"
    themes.mkdir()
    (themes / "agent-dark.toml").write_text("primary = 'nope'")  # would replace the shipped one: rejected
    (themes / "other.toml").write_text("[[[")
    app = make_app(filled, clock, settings={"theme": "other"}, user_theme_dir=themes)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started)
        assert app.theme == "agent-dark"
        skipped = [n for n in app._notifications if n.title == "Theme file skipped"]
        assert len(skipped) == 1 and "other.toml" in skipped[0].message and "agent-dark.toml" in skipped[0].message


async def test_theme_choice_from_the_palette_is_remembered(filled: Path, clock: ManualClock, tmp_path: Path) -> None:
    state = tmp_path / "state" / "console.json"
    app = make_app(filled, clock, state_path=state)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(pilot, lambda: app.started)
        await pilot.press("ctrl+p")
        await pilot.press(*"Theme: agent-light")
        await pilot.pause(0.3)  # the palette searches in a worker; enter picks the top hit
        await pilot.press("enter")
        await pilot_until(pilot, lambda: app.theme == "agent-light", what="theme switched")
        await pilot_until(pilot, lambda: state.exists(), what="state written")
    assert make_app(filled, clock, state_path=state).theme == "agent-light"  # the next start uses it
    assert make_app(filled, clock).theme == "agent-dark"
