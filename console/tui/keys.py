"""The console's keys as one list: every binding its app, screens and widgets declare, after `[keys]` remaps.

The help screen, the palette and the start-up checks of `[keys]` read them from here, so all three say the
same thing: which key runs what, where, and which remaps are ignored (an unknown id) or clash (a key that
another action of the same screen uses).
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from textual.binding import Binding
from textual.dom import DOMNode
from textual.keys import format_key

from console.textsafe import terminal_safe
from console.tui.textual_8_2 import normalized_keys

# Where each class's keys work, as the help screen titles them (the main screen's widgets share its keys).
PLACES: dict[str, str] = {
    "MainScreen": "Main screen",
    "ConsoleApp": "Main screen",
    "EventsTable": "Main screen: the events table",
    "EventsPane": "Main screen: the events pane",
    "DetailScreen": "An event's detail",
    "ApprovalScreen": "An approval's screen",
    "SearchScreen": "Search (/) and outbox messages (o)",
    "MessageScreen": "An outbox message",
    "TimersScreen": "Timers (t)",
    "NotesScreen": "Notes (m)",
    "SpendScreen": "Spend ($)",
    "TimelineScreen": "A run's timeline (t in an event's detail)",
    "InjectScreen": "The inject form (i)",
    "BudgetScreen": "Budgets (b)",
    "FilterScreen": "The filter list (F)",
    "ConfirmScreen": "A question before acting",
    "KeysScreen": "This help",
}
# Where the keys live that are all live at once on the main screen: the app's (help, quit), the main screen's
# and its widgets'.
MAIN_SCREEN_MODULES = ("console.tui.app", "console.tui.screens.main", "console.tui.widgets")
# Keys that are no binding of ours but work on the main screen all the same.
PLAIN_KEYS: tuple[tuple[str, str, str], ...] = (
    ("↑ ↓ j k pgup pgdn", "Move", "through the events; past the first or last row the window moves"),
    ("← →", "Scroll sideways", "the events table, to read a long error at 80 columns"),
    ("tab", "Next pane", "between the events table and the approvals table"),
    ("ctrl+p", "Palette", "every action by name (with its key), each filter, each theme"),
)


def import_screens() -> None:
    """Import every modal screen's module. The console imports each screen when it is first opened (the first
    frame shows none of them), but the help screen, the palette and the `[keys]` checks list the keys of all."""
    import console.tui.screens

    for module in pkgutil.iter_modules(console.tui.screens.__path__):
        importlib.import_module(f"console.tui.screens.{module.name}")


def console_classes() -> Iterator[type]:
    """Every class of ours that declares key bindings, the app first, then widgets, then screens."""
    import_screens()
    found: list[type] = []
    pending: list[type] = [DOMNode]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("console.") and "BINDINGS" in vars(cls):
            found.append(cls)
    order = list(PLACES)
    yield from sorted(found, key=lambda c: (order.index(c.__name__) if c.__name__ in order else len(order),
                                            c.__name__))


def own_bindings(cls: type) -> list[Binding]:
    return [b for b in vars(cls).get("BINDINGS", ()) if isinstance(b, Binding)]


def binding_ids() -> set[str]:
    """Every binding id the console's app, screens and widgets declare (what `[keys]` may remap)."""
    return {b.id for cls in console_classes() for b in own_bindings(cls) if b.id}


def unknown_key_ids(keys: Mapping[str, str], known: set[str]) -> list[str]:
    """One line per `[keys]` entry that names no binding, with the nearest id when one is close."""
    lines = []
    for name in sorted(set(keys) - known):
        ids = sorted(known)
        close = [i for i in ids if i.endswith("." + name)] or difflib.get_close_matches(name, ids, n=1)
        hint = f" (did you mean {close[0]}?)" if close else " (docs/console.md lists the ids)"
        lines.append(f"[keys] {terminal_safe(name)}: no such binding id{hint}")
    return lines


def keys_of(binding: Binding, keymap: Mapping[str, str]) -> list[str]:
    """The keys a binding answers to after the remaps, in Textual's long form (question_mark, not ?)."""
    keys = keymap.get(binding.id, binding.key) if binding.id else binding.key
    return [key.strip() for key in normalized_keys(keys).split(",") if key.strip()]


def shown_key(key: str) -> str:
    """A key as the footer writes it (^p for ctrl+p, ? for question_mark, shift+↓)."""
    *modifiers, name = key.split("+")
    shown = format_key(name)
    return "^" + shown if modifiers == ["ctrl"] else "+".join([*modifiers, shown])


# The habits' letters beside the keys they double (j/k, g/G): a letter the owner's [keys] gives to an action is
# theirs, and the events table keeps only its arrow, Home or End key for that move.
HABIT_KEYS = {"events.up": "up,k", "events.down": "down,j", "events.newest": "home,g", "events.oldest": "end,G"}


def owner_keymap(remaps: Mapping[str, str]) -> dict[str, str]:
    """The owner's [keys] with the habit letters they took withdrawn from the events table (the focused table's
    own j would otherwise win over `"console.inject" = "j"`)."""
    taken = {key.strip() for keys in remaps.values() for key in keys.split(",")}
    merged = dict(remaps)
    for binding_id, keys in HABIT_KEYS.items():
        if binding_id not in remaps and taken & set(keys.split(",")):
            merged[binding_id] = ",".join(key for key in keys.split(",") if key not in taken)
    return merged


def key_clashes(keymap: Mapping[str, str], skip_actions: Iterable[str] = ()) -> list[str]:
    """One line per remap that gives a key to two actions of one place: a screen's own keys, or the main
    screen's (the app's and its widgets', which are all live at once). Textual quietly keeps one of them
    (the docs' own example `"console.stall" = "S"` took Sort away); this says which two, so the owner can
    pick another key. Bindings of actions in skip_actions (the demo's test keys, outside the demo) do not
    count."""
    skip = set(skip_actions)
    places: dict[str, list[tuple[type, Binding]]] = {}
    for cls in console_classes():
        place = "main" if cls.__module__.startswith(MAIN_SCREEN_MODULES) else cls.__name__
        places.setdefault(place, []).extend((cls, b) for b in own_bindings(cls)
                                            if b.description and b.action.split("(")[0] not in skip)
    lines: list[str] = []
    for bindings in places.values():
        by_key: dict[str, list[tuple[type, Binding]]] = {}
        for cls, binding in bindings:
            for key in keys_of(binding, keymap):
                by_key.setdefault(key, []).append((cls, binding))
        for key, holders in by_key.items():
            actions = {b.action for _c, b in holders}
            remapped = [b for _c, b in holders if b.id in keymap]
            if len(actions) < 2 or not remapped:
                continue
            for binding in remapped:
                others = [b for _c, b in holders if b.action != binding.action]
                named = ", ".join(f"{b.id or b.action} ({b.description})" for b in others)
                lines.append(f'[keys] {binding.id} = "{terminal_safe(keymap[binding.id or ""])}" takes '
                             f"{shown_key(key)}, which {named} uses too: one key runs one of them; "
                             "pick another key")
    return sorted(set(lines))


@dataclass(frozen=True)
class KeyRow:
    """One line of the help screen: where it works, the keys, what it does."""

    place: str
    keys: str
    does: str
    detail: str
    binding_id: str

    def matches(self, words: list[str]) -> bool:
        text = f"{self.place} {self.keys} {self.does} {self.detail} {self.binding_id}".lower()
        return all(word in text for word in words)


def key_rows(keymap: Mapping[str, str], available: Iterable[str] | None = None) -> list[KeyRow]:
    """Every key, main screen first. available: the actions that work here (None: all); a binding whose
    action is not in it (a demo key outside the demo) is left out."""
    allowed = None if available is None else set(available)
    rows: list[KeyRow] = []
    for cls in console_classes():
        place = PLACES.get(cls.__name__, cls.__name__)
        for binding in own_bindings(cls):
            if not binding.description:
                continue  # a fallback of another binding of the same key (the detail's r, y, n)
            action = binding.action.split("(")[0]
            if allowed is not None and cls.__name__ in ("ConsoleApp", "MainScreen") and action not in allowed:
                continue
            keys = " / ".join(shown_key(k) for k in keys_of(binding, keymap))
            if binding.key_display and binding.id not in keymap:
                keys = binding.key_display
            rows.append(KeyRow(place, keys, binding.description, binding.tooltip, binding.id or ""))
        if cls.__name__ == "EventsTable":
            rows.extend(KeyRow(place, keys, does, detail, "") for keys, does, detail in PLAIN_KEYS)
    return rows


def key_for_id(binding_id: str, keymap: Mapping[str, str]) -> str | None:
    """The first key of a binding id, as the footer shows it, after remaps; None for an unknown id."""
    for cls in console_classes():
        for binding in own_bindings(cls):
            if binding.id == binding_id:
                keys = keys_of(binding, keymap)
                if binding.key_display and binding_id not in keymap:
                    return binding.key_display
                return shown_key(keys[0]) if keys else None
    return None
