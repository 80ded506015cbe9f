"""A tool server that is down shows in the header's banner (issue 21.3), whole, at every size: the lease pane's line
is cut or below the fold at 80x24, and the toast goes."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.clock import ManualClock
from tests.support import pilot_until
from tests.tui.conftest import reopen
from tests.tui.scenes import make_app, started, text_of

LINE = "tools: shop down — SHOP_TOKEN not set — retrying"


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_a_tool_server_down_shows_whole_in_the_header(filled: Path, clock: ManualClock,
                                                            size: tuple[int, int]) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=size) as pilot:
        await started(app, pilot)
        banner = app.query_one("#header-banner")
        assert not banner.has_class("-shown")  # the lease is live and every tool up: no banner
        with reopen(filled) as store:
            lease = store.lease()
            assert lease is not None
            assert store.set_tool_health(lease.holder, lease.gen, "shop", "down", "SHOP_TOKEN not set",
                                         now=clock.now())
        await pilot_until(pilot, lambda: LINE in " ".join(text_of(app, "#header-banner").split()), what="the banner")
        await pilot_until(pilot, lambda: banner.region.height >= 1 and banner.region.width == size[0],
                          what="the banner laid out across the screen")
        with reopen(filled) as store:
            assert store.set_tool_health(lease.holder, lease.gen, "shop", "up", None, now=clock.now())
        await pilot_until(pilot, lambda: not banner.has_class("-shown"), what="the banner gone")


async def test_a_bare_server_and_a_refused_host_show_in_the_header_and_the_lease_pane(
        filled: Path, clock: ManualClock) -> None:
    app = make_app(filled, clock)
    async with app.run_test(size=(120, 40)) as pilot:
        await started(app, pilot)
        with reopen(filled) as store:
            lease = store.lease()
            assert lease is not None
            assert store.set_tool_health(lease.holder, lease.gen, "gh", "up", None, now=clock.now(), sandbox="on",
                                         refused={"evil.example:443": 1})
            assert store.set_tool_health(lease.holder, lease.gen, "notes", "up", None, now=clock.now(),
                                         sandbox="off")
        line = "tools: gh refused 1 connection: evil.example:443; notes runs bare (sandbox = false)"
        await pilot_until(pilot, lambda: line in " ".join(text_of(app, "#header-banner").split()), what="the banner")
        await pilot_until(pilot, lambda: line in " ".join(text_of(app, "#lease-tools").split()),
                          what="the lease pane's tools line")
