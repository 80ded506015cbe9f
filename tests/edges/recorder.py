"""A local HTTP server that records every request and answers with the statuses it is told to."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Recorder:
    statuses: list[int] = field(default_factory=list)   # answered in turn; 200 once they run out
    requests: list[Recorded] = field(default_factory=list)
    hang: bool = False                                    # never answer (to test timeouts)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""
    _runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        self.requests.append(Recorded(request.path, dict(request.headers), body))
        if self.hang:
            await self.release.wait()
        status = self.statuses.pop(0) if self.statuses else 200
        return web.json_response({"status": status}, status=status)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()
