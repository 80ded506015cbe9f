"""What every surface does to outside text before it shows it (console/textsafe.py): control, format, bidi and
invisible characters as escapes, words that mix scripts marked, and the same JSON after its escapes."""

from __future__ import annotations

import json
import re

import pytest
import regex

from console.textsafe import INVISIBLE, json_terminal_safe, mixed_scripts, terminal_safe, terminal_safe_lines


def test_the_invisible_set_is_unicodes_default_ignorable_and_format_characters() -> None:
    ours = re.compile(f"[{INVISIBLE}]")
    theirs = regex.compile(r"[\p{Default_Ignorable_Code_Point}\p{Cf}\p{Zl}\p{Zp}]")
    every = "".join(chr(code) for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF)
    assert ours.findall(every) == theirs.findall(every)


@pytest.mark.parametrize(("raw", "shown"), [
    ("a\u200bb", "a\\u200bb"), ("pay\u202eevil", "pay\\u202eevil"),
    ("x\U000e0041\U000e0042", "x\\U000e0041\\U000e0042"),
    ("soft\u00adhyphen", "soft\\xadhyphen"), ("filler\u3164", "filler\\u3164"), ("bom\ufeff", "bom\\ufeff"),
    ("sel\ufe0fector", "sel\\ufe0fector"), ("\x1b[2J", "\\x1b[2J"), ("lone \udc80", "lone \\udc80"),
])
def test_every_invisible_character_is_an_escape(raw: str, shown: str) -> None:
    assert terminal_safe(raw) == shown
    assert terminal_safe(shown) == shown  # idempotent


def test_an_emoji_sequence_stays_whole() -> None:
    family, heart = "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\u2764\ufe0f"
    assert terminal_safe(f"{family} {heart}") == f"{family} {heart}"


def test_a_word_that_mixes_scripts_shows_its_odd_letters() -> None:
    assert mixed_scripts("p\u0430ypal") == ["Latin", "Cyrillic"]
    assert terminal_safe("send to p\u0430ypal.com now") == "send to p\\u0430ypal.com now"
    assert terminal_safe("Москв\u0430 and Moscow") == "Москв\u0430 and Moscow"  # each word of one script
    assert terminal_safe("Москвa") == "Москв\\x61"  # a Latin a in a Cyrillic word
    for together in ("東京タワー", "ひらがなとカタカナ", "한국어漢字", "iPhoneケース", "naïve café"):
        assert terminal_safe(together) == together


def test_lines_keep_their_newlines_and_json_stays_the_same_json() -> None:
    assert terminal_safe_lines("one\u200b\ntwo") == "one\\u200b\ntwo"
    text = json.dumps({"memo": "x\U000e0041\u202e\u200b"}, ensure_ascii=False)
    safe = json_terminal_safe(text)
    assert safe.isascii() and json.loads(safe) == json.loads(text)
