"""Colour themes from TOML files: the shipped ones (package data) and the user's own folder.

A theme file holds textual.theme.Theme fields at the top level and extra CSS variables under
[variables]. A file that cannot be read becomes one error message and is skipped, never a crash.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any

import platformdirs
from textual.color import Color, ColorParseError
from textual.theme import Theme

from console.config import APP_NAME

DEFAULT_THEME = "agent-dark"
SHIPPED = ("agent-dark", "agent-light", "agent-high-contrast")
_COLOUR_FIELDS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground", "background",
                  "surface", "panel", "boost")
_OTHER_FIELDS = {"name": str, "dark": bool, "luminosity_spread": float, "text_alpha": float}
_KNOWN = {f.name for f in fields(Theme)}
# Variables the stylesheet uses; a theme without them gets these, derived from its own colours.
STATUS_VARIABLES = ("status-pending", "status-running", "status-done", "status-dead", "urgent")


@dataclass(frozen=True)
class ThemeLoad:
    themes: list[Theme]
    errors: list[str]


def user_theme_dir() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "themes"


def shipped_theme_dir() -> Traversable:
    return resources.files("console.tui").joinpath("themes")


def parse_theme(text: str, origin: str) -> Theme:
    """One theme from TOML text; ValueError names the file and what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"theme {origin}: not valid TOML ({exc})") from exc
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        raise ValueError(f"theme {origin}: unknown setting {', '.join(unknown)}")
    if "primary" not in data:
        raise ValueError(f"theme {origin}: 'primary' colour is required")
    options: dict[str, Any] = {}
    for key, value in data.items():
        if key in _COLOUR_FIELDS:
            options[key] = _colour(value, key, origin)
        elif key in _OTHER_FIELDS:
            wanted = _OTHER_FIELDS[key]
            if wanted is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, wanted):
                raise ValueError(f"theme {origin}: {key} must be a {wanted.__name__}")
            options[key] = value
        elif key == "variables":
            if not isinstance(value, dict):
                raise ValueError(f"theme {origin}: [variables] must be a table")
            options[key] = {str(k): _variable(v, str(k), origin) for k, v in value.items()}
        else:
            raise ValueError(f"theme {origin}: {key} cannot be set from a file")
    name = options.get("name") or Path(origin).stem
    if not name.strip():
        raise ValueError(f"theme {origin}: the name is empty")
    options["name"] = name
    theme = Theme(**options)
    try:
        theme.to_color_system().generate()
    except Exception as exc:  # Textual's own checks on the combination, reported as a bad file
        raise ValueError(f"theme {origin}: {exc}") from exc
    return theme


def _colour(value: Any, key: str, origin: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"theme {origin}: {key} must be a colour string such as \"#4FA3E0\"")
    try:
        Color.parse(value)
    except ColorParseError as exc:
        raise ValueError(f"theme {origin}: {key} = {value!r} is not a colour") from exc
    return value


def _variable(value: Any, key: str, origin: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"theme {origin}: variable {key} must be a string")
    return value


def status_variables(theme: Theme | None) -> dict[str, str]:
    """The status colours (STATUS_VARIABLES) a theme gives the events table: its warning, primary, success,
    error and accent colours, or the terminal's own ANSI colours where it has none."""
    variables = {
        "status-pending": "ansi_yellow", "status-running": "ansi_blue", "status-done": "ansi_green",
        "status-dead": "ansi_red", "urgent": "ansi_bright_yellow",
    }
    if theme is not None:
        for name, colour in zip(STATUS_VARIABLES, (theme.warning, theme.primary, theme.success, theme.error,
                                                   theme.accent), strict=True):
            if colour:
                variables[name] = colour
    return variables


def load_themes(user_dir: Path | None = None) -> ThemeLoad:
    """The shipped themes, then the user's (a user theme with a shipped name replaces it)."""
    themes: dict[str, Theme] = {}
    errors: list[str] = []
    entries: list[tuple[str, Any]] = sorted(
        ((entry.name, entry) for entry in shipped_theme_dir().iterdir() if entry.name.endswith(".toml")),
        key=lambda pair: pair[0],
    )
    folder = user_dir if user_dir is not None else user_theme_dir()
    if folder.is_dir():
        entries += sorted(((str(path), path) for path in folder.glob("*.toml")), key=lambda pair: pair[0])
    for origin, entry in entries:
        try:
            theme = parse_theme(entry.read_text(encoding="utf-8"), origin)
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(f"theme {origin}: cannot be read ({exc})")
            continue
        except ValueError as exc:
            errors.append(str(exc))
            continue
        themes[theme.name] = theme
    return ThemeLoad(list(themes.values()), errors)
