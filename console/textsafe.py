"""Text from outside (event ids, payload strings, errors, message bodies) made safe for a terminal and for a card.

A signed webhook may carry any id and any text; printed raw, an ESC or an 8-bit CSI in it is a terminal
command (set the title, clear the screen, hide what follows), a bidi override reorders what the reader sees,
and an invisible character (zero-width space, word joiner, a tag character carrying hidden ASCII, a variation
selector, a Hangul filler) makes two texts that look the same differ, or hides words from the reader while a
model reads them. Every such character is shown as an escape instead: ESC as \\x1b, U+202E as \\u202e, the tag
character U+E0041 as \\U000e0041. The set is every control character (C0, DEL, C1), every format character
(Unicode category Cf: the bidi embeddings, overrides and isolates among them), every default-ignorable code point
(what renders as nothing), the line and paragraph separators, and lone surrogates. A zero-width joiner or a
variation selector right after an emoji stays: it is how an emoji sequence is written, and it hides nothing.

A word that mixes scripts (a Cyrillic "а" among Latin letters: "pаypal") is the other way two texts look the
same: in such a word every letter of a script other than the word's main one is shown as an escape too, so
"pаypal" reads "p\\u0430ypal". Scripts that are written together (Han with Hiragana and Katakana, Han with
Hangul, either with Latin: Unicode's "highly restrictive" sets, UTS #39) are not marked.

Only the display changes; the inbox keeps the text as it came. Escaping is idempotent: escaped text is ASCII
where it was changed, so escaping it again changes nothing.
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from typing import Any

# Generated from Unicode's Default_Ignorable_Code_Point, Cf, Zl and Zp (a test keeps it equal to the `regex`
# module's \p{DI}, \p{Cf}, \p{Zl}, \p{Zp}), with the lone surrogates a decoder's surrogateescape leaves.
INVISIBLE = ("\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5\u180b-\u180f"
             "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"
             "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
             "\U000e0000-\U000e0fff\ud800-\udfff")
_UNSAFE = re.compile(f"[\x00-\x1f\x7f-\x9f{INVISIBLE}]")
_UNSAFE_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{INVISIBLE}]")
# What may follow an emoji inside its sequence: the zero-width joiner and the text / emoji presentation selectors.
_EMOJI_JOINERS = frozenset("\u200d\ufe0e\ufe0f")
_WORD = re.compile(r"\w{2,}")

_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def escape_char(char: str) -> str:
    """One character as an escape a reader sees: \\t, \\x1b, \\u202e, \\U000e0041."""
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _is_emoji(char: str) -> bool:
    code = ord(char)
    return (0x1F000 <= code <= 0x1FAFF or 0x2190 <= code <= 0x2BFF or 0x2300 <= code <= 0x23FF
            or code in (0x00A9, 0x00AE, 0x203C, 0x2049, 0x2122, 0x2139, 0x3030, 0x303D, 0x20E3))


def _escaper(text: str) -> Any:
    def escape(match: re.Match[str]) -> str:
        char, start = match.group(), match.start()
        if char in _EMOJI_JOINERS and start and (_is_emoji(text[start - 1]) or text[start - 1] in _EMOJI_JOINERS):
            return char
        return escape_char(char)
    return escape


def terminal_safe(text: str) -> str:
    """One line of outside text, every unsafe character escaped (a newline too: it could fake a line), and the
    letters that make a word mix scripts shown as escapes."""
    return _mark_mixed(_UNSAFE.sub(_escaper(text), text))


def terminal_safe_lines(text: str) -> str:
    """Several lines the program itself broke (a notice, a list of reasons, a message): newlines stay."""
    return _mark_mixed(_UNSAFE_BUT_NEWLINE.sub(_escaper(text), text))


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    high, low = divmod(code - 0x10000, 0x400)  # JSON writes a character past the BMP as its surrogate pair
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def json_terminal_safe(text: str) -> str:
    """JSON text from json.dumps(..., ensure_ascii=False), safe to print and still the same JSON.

    json.dumps escapes C0 itself but leaves DEL, C1, the separators, the bidi controls and the invisible
    characters raw; these can only stand inside string literals, where a \\uXXXX escape (a surrogate pair past
    the BMP) decodes to the very same character. A raw newline in json.dumps' output is always its own
    indentation, so it stays. Mixed scripts are left as they are: a reader of JSON compares code points."""
    return _UNSAFE_BUT_NEWLINE.sub(_json_escape, text)


# --- words that mix scripts ---------------------------------------------------------------------------------

# The scripts a letter is looked up in, most common first; a letter of any other is its own script ("other").
_SCRIPTS = ("Latin", "Cyrillic", "Greek", "Han", "Hiragana", "Katakana", "Hangul", "Arabic", "Hebrew", "Armenian",
            "Georgian", "Devanagari", "Bengali", "Thai", "Cherokee", "Coptic", "Ethiopic", "Tamil", "Telugu",
            "Bopomofo", "Lisu", "Tifinagh", "Vai", "Canadian_Aboriginal", "Runic", "Ogham", "Old_Italic")
# Scripts written together in one word (UTS #39, "highly restrictive"): a word whose scripts are all within one
# of these sets does not mix scripts.
_TOGETHER = (frozenset({"Latin", "Han", "Hiragana", "Katakana"}), frozenset({"Latin", "Han", "Bopomofo"}),
             frozenset({"Latin", "Han", "Hangul"}))


@functools.lru_cache(maxsize=4096)
def script_of(char: str) -> str | None:
    """The script of a letter ('Latin', 'Cyrillic', ...); None for what belongs to every script (digits, marks,
    the underscore). The `regex` module is loaded the first time a word has a letter outside ASCII."""
    if char.isascii():
        return "Latin" if char.isalpha() else None
    if not unicodedata.category(char).startswith("L"):
        return None
    import regex  # Unicode's script property; the standard library has none

    for name in _SCRIPTS:
        if regex.match(rf"\p{{Script={name}}}", char):
            return name
    found = regex.match(r"\p{Script=Common}|\p{Script=Inherited}", char)
    return None if found else f"other:{unicodedata.name(char, hex(ord(char))).split(' ')[0]}"


def mixed_scripts(word: str) -> list[str]:
    """The scripts a word's letters come from when they mix (empty when the word is of one script, or of scripts
    written together)."""
    scripts = list(dict.fromkeys(s for s in map(script_of, word) if s is not None))
    if len(scripts) < 2 or any(set(scripts) <= together for together in _TOGETHER):
        return []
    return scripts


def _mark_mixed(text: str) -> str:
    if text.isascii():
        return text
    return _WORD.sub(_mark_word, text)


def _mark_word(match: re.Match[str]) -> str:
    word = match.group()
    if word.isascii() or not mixed_scripts(word):
        return word
    counts: dict[str, int] = {}
    for char in word:
        script = script_of(char)
        if script is not None:
            counts[script] = counts.get(script, 0) + 1
    main = max(counts, key=lambda name: (counts[name], name == "Latin"))
    return "".join(escape_char(char) if script_of(char) not in (None, main) else char for char in word)


class TerminalSafeFormatter(logging.Formatter):
    """Log lines for a terminal: the message (which may quote a sender's id or text) is escaped; a
    traceback appended after it stays as it is."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return terminal_safe(super().formatMessage(record))
