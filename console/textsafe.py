"""Text from outside (event ids, payload strings, errors, message bodies) made safe for a terminal.

A signed webhook may carry any id and any text; printed raw, an ESC or an 8-bit CSI in it is a terminal
command (set the title, clear the screen, hide what follows) and a bidi override reorders what the
reader sees. Every control character (C0, DEL, C1), the Unicode line and paragraph separators and the
bidi embedding, override and isolate characters are shown as escapes instead: ESC as \\x1b, U+202E as
\\u202e. Only the display changes; the inbox keeps the text as it came.
"""

from __future__ import annotations

import logging
import re

_BIDI_AND_SEPARATORS = "\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}]")
_UNSAFE_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}]")


_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def terminal_safe(text: str) -> str:
    """One line of outside text, every unsafe character escaped (a newline too: it could fake a line)."""
    return _UNSAFE.sub(_escape, text)


def terminal_safe_lines(text: str) -> str:
    """Several lines the program itself broke (a notice, a list of reasons): newlines stay."""
    return _UNSAFE_BUT_NEWLINE.sub(_escape, text)


def json_terminal_safe(text: str) -> str:
    """JSON text from json.dumps(..., ensure_ascii=False), safe to print and still the same JSON.

    json.dumps escapes C0 itself but leaves DEL, C1, the separators and the bidi controls raw; these
    can only stand inside string literals, where a \\uXXXX escape decodes to the very same character.
    A raw newline in json.dumps' output is always its own indentation, so it stays."""
    return _UNSAFE_BUT_NEWLINE.sub(_json_escape, text)


class TerminalSafeFormatter(logging.Formatter):
    """Log lines for a terminal: the message (which may quote a sender's id or text) is escaped; a
    traceback appended after it stays as it is."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return terminal_safe(super().formatMessage(record))
