"""The model in use in the console's header (issue 34): a fallback taking over is a toast, the header's model and a
banner line saying why; the primary back is a toast and the banner goes."""

from __future__ import annotations

import socket
from pathlib import Path

from console.clock import ManualClock
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, started, text_of


def closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def toasts(app: object) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_a_fallback_taking_over_is_a_toast_the_header_and_a_banner_line(filled: Path,
                                                                             clock: ManualClock) -> None:
    models = [{"name": "primary", "protocol": "anthropic", "base_url": closed_url(), "model": "claude-sonnet-5-5"},
              {"name": "local", "protocol": "openai", "base_url": closed_url() + "/v1", "model": "qwen3"}]
    app = make_app(filled, clock, settings={"agent": "claude", "models": models})
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        await pilot_until(pilot, lambda: "model primary" in text_of(app, "#header-title"), what="the primary")
        banner = app.query_one("#header-banner")
        assert not banner.has_class("-shown")
        with reopen(filled) as store:
            lease = store.lease()
            assert lease is not None
            assert store.set_model_health(lease.holder, lease.gen, "primary:x", "primary", "cooling",
                                          now=clock.now(), until=clock.now() + 600, reason="rate limited (429)")
        line = "model: local answers (primary cooling: rate limited (429))"
        await pilot_until(pilot, lambda: line in " ".join(text_of(app, "#header-banner").split()), what="the banner")
        assert "model local" in text_of(app, "#header-title")
        await pilot_until(pilot, lambda: line in toasts(app), what="the toast")
        with reopen(filled) as store:
            assert store.model_answered(lease.holder, lease.gen, "primary:x", "primary", now=clock.now())
        await pilot_until(pilot, lambda: not banner.has_class("-shown"), what="the banner gone")
        assert "model primary" in text_of(app, "#header-title")
        await pilot_until(pilot, lambda: "primary answers again" in toasts(app), what="the toast")
