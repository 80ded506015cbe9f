"""The receiver alone (`serve`) loads the telemetry SDK before it listens, off its event loop, so that the first
delivery's span does not hold every request behind it for the import. A fresh process each, since the SDK once
imported stays in sys.modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import asyncio, sys
from pathlib import Path
from console.assembly import assemble_serve
from console.config import Settings

async def main() -> None:
    settings = Settings(db=Path(sys.argv[1]), telemetry=sys.argv[2] == "on", webhooks={"port": 0, "sources": {
        "github": {"verifier": "github", "secret_env": "SERVE_TELEMETRY_TEST_SECRET"}}})
    system = assemble_serve(settings)
    await system.start()
    try:
        print("opentelemetry.sdk.trace" in sys.modules)
    finally:
        await system.stop()

asyncio.run(main())
"""


@pytest.mark.parametrize(("telemetry", "loaded"), [("on", "True"), ("off", "False")])
def test_serve_loads_the_sdk_before_the_first_delivery_when_telemetry_is_on(
    tmp_path: Path, telemetry: str, loaded: str
) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "inbox.db"), telemetry], cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "SERVE_TELEMETRY_TEST_SECRET": "x"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [loaded]
