"""What the in-process Telegram tests share: the owner's chat, the bot's token and the environment naming it.
The `bot` fixture (tests/edges/conftest.py) serves the stand-in Bot API with this token."""

from __future__ import annotations

OWNER = 424242
TOKEN = "123456:stand-in-token-AAbbCC"
ENV = {"TG_TEST_TOKEN": TOKEN}
