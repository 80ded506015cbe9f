"""The stand-in Bot API's long poll holds the bot's updates as the Bot API's does (issue 36, item 3): a getUpdates
still connected is terminated by the next one (409, counted as a conflict), a getUpdates whose client hung up holds
nothing, and one whose client is there but silent (a frozen process: its socket open) holds them until its timeout.
The takeover tests count conflicts on it, so a stand-in that counted a poll nobody waits for would blame the new
holder for a poll that was already closed."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from tests.edges.phone_harness import until
from tests.edges.phone_standins import StandInBotApi


async def get_updates(http: aiohttp.ClientSession, bot: StandInBotApi, timeout: float) -> tuple[int, Any]:
    async with http.post(f"{bot.url}/bot{bot.token}/getUpdates", json={"timeout": timeout}) as response:
        return response.status, await response.json()


async def test_a_poll_whose_client_hung_up_holds_nothing(bot: StandInBotApi) -> None:
    async with aiohttp.ClientSession() as first, aiohttp.ClientSession() as second:
        waiting = asyncio.create_task(get_updates(first, bot, 30))
        await until(lambda: bot._waiting == 1, "the first poll waiting")
        waiting.cancel()  # the client closes its connection
        await asyncio.gather(waiting, return_exceptions=True)
        await first.close()
        await until(lambda: bot._waiting == 0, "the hung-up poll let go")
        status, body = await get_updates(second, bot, 0)
    assert (status, body["ok"], bot.conflicts) == (200, True, 0)


async def test_a_poll_still_connected_is_terminated_by_the_next_and_counted(bot: StandInBotApi) -> None:
    async with aiohttp.ClientSession() as first, aiohttp.ClientSession() as second:
        waiting = asyncio.create_task(get_updates(first, bot, 30))
        await until(lambda: bot._waiting == 1, "the first poll waiting")
        status, _ = await get_updates(second, bot, 0)
        terminated, body = await waiting
    assert (status, terminated, body["error_code"], bot.conflicts) == (200, 409, 409, 1)
