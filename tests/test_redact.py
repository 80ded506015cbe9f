"""Credentials in URL settings never reach an error, a log line or the inbox: redact_url and redact_urls."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from console.assembly import build_engine
from console.clock import ManualClock
from console.config import ConfigError, Settings, load_settings
from console.redact import install_log_redaction, redact_url, redact_urls


@pytest.mark.parametrize(("url", "shown"), [
    ("http://user:pass@proxy:8080/v1", "http://***@proxy:8080/v1"),
    ("https://token@api.example.com", "https://***@api.example.com"),
    ("https://api.example.com/hook?channel=ops&token=abc123&x=1", "https://api.example.com/hook?channel=ops&token=***&x=1"),
    ("https://h/p?api_key=k1&apiKey=k2&access_token=t&sig=s&X-Amz-Signature=z&password=p&page=2",
     "https://h/p?api_key=***&apiKey=***&access_token=***&sig=***&X-Amz-Signature=***&password=***&page=2"),
    ("http://127.0.0.1:9000/notify", "http://127.0.0.1:9000/notify"),
    ("https://[::1]:8443/x?secret=", "https://[::1]:8443/x?secret=***"),
])
def test_redact_url_hides_userinfo_and_token_parameters(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_urls_finds_every_url_in_a_text() -> None:
    text = "could not reach http://alice:s3cret@proxy.local:3128 (then tried https://h/x?key=k9), giving up"
    shown = "could not reach http://***@proxy.local:3128 (then tried https://h/x?key=***), giving up"
    assert redact_urls(text) == shown
    assert redact_urls("no address here") == "no address here"


def test_a_bad_url_setting_is_named_without_its_credentials() -> None:
    with pytest.raises(ConfigError) as failure:
        load_settings(None, env={"AGENT_CONSOLE_CLAUDE_BASE_URL": "ftp://user:s3cret@proxy"})
    assert "s3cret" not in str(failure.value)
    assert "got 'ftp://***@proxy'" in str(failure.value)


def test_the_log_filter_redacts_a_libraries_request_line(caplog: pytest.LogCaptureFixture) -> None:
    install_log_redaction()
    install_log_redaction()  # twice is once
    caplog.set_level(logging.INFO)
    logging.getLogger("httpx2").info('HTTP Request: %s %s "%s"', "POST", "http://u:s3cret@proxy/v1/messages", "200")
    assert "s3cret" not in caplog.text and "http://***@proxy/v1/messages" in caplog.text
    assert len(logging.getLogger("httpx2").filters) == 1


class LeakyAgent:
    """An agent whose failure names a URL with its credentials, as a library's error might."""

    name = "leaky"

    def run(self, ctx: object) -> None:
        raise RuntimeError("POST https://bot:s3cret@hooks.example.com/x?token=abc failed")


async def test_a_runs_error_is_stored_and_logged_without_credentials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    engine = build_engine(Settings(db=tmp_path / "inbox.db"), clock=ManualClock(1_800_000_000), agent=LeakyAgent(),
                    holder="w", idle_cap=0.05, install_defaults=False)
    await engine.start()
    try:
        await engine.ingest("chat", "m1", {})
        deadline = asyncio.get_running_loop().time() + 60
        while not (history := await engine.read(lambda s: [a for a in s.history(1) if a.kind == "error"])):
            assert asyncio.get_running_loop().time() < deadline, "the run never failed"
            await asyncio.sleep(0.01)  # the polling interval of a condition check
        event = await engine.read(lambda s: s.event(1))
    finally:
        await engine.stop()
    assert history[0].detail == "RuntimeError: POST https://***@hooks.example.com/x?token=*** failed"
    assert event is not None and event.error == history[0].detail
    assert "s3cret" not in caplog.text and "abc" not in caplog.text
