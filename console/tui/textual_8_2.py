"""The console's one reach into Textual's private names, checked against Textual 8.2 (8.2.8): each has no public way
in that version. Everything else in the console uses Textual's public API (tests/test_style.py holds it to that, and
holds this module's name to the Textual installed: a Textual upgrade fails that test until these are checked again
and the module renamed for the new version)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from textual.app import App
from textual.binding import Binding
from textual.dom import DOMNode
from textual.keys import _normalize_key_list
from textual.notifications import Notification
from textual.widgets._footer import FooterKey

__all__ = ["FooterKey", "bindings_by_key", "has_registered_themes", "keymap", "normalized_keys", "withdraw_toast"]
CHECKED_AGAINST = (8, 2)


def keymap(app: App[Any]) -> Mapping[str, str]:
    """The binding ids remapped by App.set_keymap, and their keys (Textual keeps them only privately)."""
    return app._keymap


def bindings_by_key(node: DOMNode) -> dict[str, list[Binding]]:
    """A node's own bindings by key, which may be changed in place (a label that changed: MainScreen.relabel)."""
    return node._bindings.key_to_bindings


def has_registered_themes(app: App[Any]) -> bool:
    """Whether any theme was registered yet (current_theme raises before)."""
    return bool(app._registered_themes)


def withdraw_toast(app: App[Any], notification: Notification) -> None:
    """Take a toast away before its time; one gone already is left alone."""
    if notification in app._notifications:
        app._unnotify(notification)


def normalized_keys(keys: str) -> str:
    """A binding's comma-separated keys as Textual reads them (its own aliases, such as `ctrl+i` for `tab`)."""
    return _normalize_key_list(keys)
