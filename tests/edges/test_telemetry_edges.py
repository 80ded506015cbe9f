"""The engine's own work as spans (issue 24): a webhook delivery's `ingest` span under the sender's trace (its
traceparent header), an outbox send's `send {channel}` span whose traceparent the HTTP channel carries, and the
timers that fired. A real engine, the receiver beside it and an HTTP endpoint on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from console import telemetry
from console.assembly import build_engine, receiver_beside
from console.cli import main
from console.clock import ManualClock
from console.core import Store
from console.edges.channels import HttpChannel
from console.edges.receiver import build_receiver
from tests.edges.conftest import NOW, SOURCES, secrets_env, webhook_settings
from tests.edges.signing import ENV_NAMES, SECRETS, body_for, sign
from tests.support import read_until

SENDER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SENDER_SPAN = "00f067aa0ba902b7"


class Endpoint:
    """An outbox endpoint that keeps each request's headers."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        seen = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                seen.headers.append({name.lower(): value for name, value in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/outbox"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    made = Endpoint()
    yield made
    made.server.shutdown()
    made.server.server_close()


async def test_a_delivery_a_send_and_a_timer_are_spans_and_the_traceparent_travels(
    tmp_path: Path, endpoint: Endpoint
) -> None:
    settings = webhook_settings(tmp_path / "inbox.db")
    settings.outbox_gap = 0
    settings.webhooks["secrets_file"] = str(tmp_path / "secrets.env")
    (tmp_path / "secrets.env").write_text("".join(f"{ENV_NAMES[k]}={v}\n" for k, v in SECRETS.items()))
    (tmp_path / "secrets.env").chmod(0o600)
    clock = ManualClock(NOW)
    engine = build_engine(settings, clock=clock, holder="traced", idle_cap=0.1, install_defaults=False,
                          channels=[HttpChannel(endpoint.url)])
    await engine.start()
    receiver = receiver_beside(settings, engine)
    await receiver.start()
    try:
        body = body_for("hmac", "traced-1")
        headers = {**sign("hmac", body, now=NOW, delivery_id="traced-1"),
                   "traceparent": f"00-{SENDER_TRACE}-{SENDER_SPAN}-01"}
        async with aiohttp.ClientSession() as http, http.post(f"{receiver.url}/hooks/home", data=body,
                                                             headers=headers) as response:
            assert response.status == 200
            plain = body_for("hmac", "plain-1")  # a sender that does not trace
            async with http.post(f"{receiver.url}/hooks/home", data=plain,
                                 headers=sign("hmac", plain, now=NOW, delivery_id="plain-1")) as response:
                assert response.status == 200
        await engine.write(lambda s: s.queue_message("hello from the outbox", now=clock.now()))
        await engine.write(lambda s: s.add_timer("nightly", clock.now(), {"text": "tick"}, now=clock.now()))
        engine.wake()
        await read_until(engine, lambda s: s.find_event("timer", f"nightly@{NOW}") is not None, limit=20)
        for delivery in ("traced-1", "plain-1"):
            await read_until(engine, lambda s, d=delivery: getattr(s.find_event("home", d), "status", None) == "done",
                             limit=20)
        await read_until(engine, lambda s: getattr(s.find_event("timer", f"nightly@{NOW}"), "status", None) == "done",
                         limit=20)
        for _ in range(200):
            if endpoint.headers:
                break
            await asyncio.sleep(0.05)  # the endpoint's own thread records the request
        assert endpoint.headers, "the outbox was not sent"
    finally:
        await receiver.stop()
        await engine.stop()

    spans = telemetry.read_spans(tmp_path, "inbox.db.telemetry.jsonl")  # the inbox's own file
    [ingest] = [s for s in spans if s["name"] == "ingest home"
                and telemetry.attributes_of(s)["agent_console.event.source_id"] == "traced-1"]
    assert (ingest["traceId"], ingest["parentSpanId"]) == (SENDER_TRACE, SENDER_SPAN)
    attrs = telemetry.attributes_of(ingest)
    assert (attrs["agent_console.event.source_id"], attrs["agent_console.ingest.verdict"]) == ("traced-1", "stored")
    assert ingest["kind"] == 2  # SPAN_KIND_SERVER

    # The run that took the delivery is traced under its ingest span: in the sender's trace.
    with Store.open(tmp_path / "inbox.db") as store:
        kept = store.find_event("home", "traced-1")
        untraced = store.find_event("home", "plain-1")
        timer_event = store.find_event("timer", f"nightly@{NOW}")
    assert kept is not None and untraced is not None and timer_event is not None
    runs = [s for s in spans if s["name"].startswith("invoke_agent")]

    def run_of(event_id: int) -> dict[str, Any]:
        [found] = [s for s in runs if event_id in telemetry.attributes_of(s)["agent_console.event.ids"]]
        return found

    def linked(span: dict[str, Any]) -> set[tuple[str, str]]:
        return {(link["traceId"], link["spanId"]) for link in span.get("links", [])}

    run = run_of(kept.id)
    assert (run["traceId"], run["parentSpanId"]) == (SENDER_TRACE, ingest["spanId"])
    assert kept.trace is not None and kept.trace[3:52] == f"{SENDER_TRACE}-{ingest['spanId']}"
    # A webhook's run read content from outside: untrusted, and the span says by what.
    run_attrs = telemetry.attributes_of(run)
    assert run_attrs["agent_console.trusted"] is False
    assert any(why.startswith("home delivery traced-1") for why in run_attrs["agent_console.tainted_by"])

    # A delivery whose sender does not trace has an ingest span of its own trace: the run that takes it links to it.
    [plain_ingest] = [s for s in spans if s["name"] == "ingest home"
                      and telemetry.attributes_of(s)["agent_console.event.source_id"] == "plain-1"]
    assert not plain_ingest.get("parentSpanId") and plain_ingest["traceId"] != SENDER_TRACE
    assert (plain_ingest["traceId"], plain_ingest["spanId"]) in linked(run_of(untraced.id))
    assert run_of(untraced.id).get("parentSpanId", "") in ("", ingest["spanId"])  # never under its own ingest

    shown = CliRunner().invoke(main, ["--db", str(tmp_path / "inbox.db"), "trace", str(kept.id)])
    assert shown.exit_code == 0, shown.output
    assert "  under ingest home  delivery traced-1, stored" in shown.output.splitlines()

    sends = [s for s in spans if s["name"] == "send http"]
    assert sends and all(telemetry.attributes_of(s)["agent_console.outbox.messages"] >= 1 for s in sends)
    carried = {h.get("traceparent", "")[3:52] for h in endpoint.headers}
    assert carried and carried <= {f"{s['traceId']}-{s['spanId']}" for s in sends}

    [fired] = [s for s in spans if s["name"] == "fire timers"]
    assert telemetry.attributes_of(fired)["agent_console.timers.fired"] >= 1
    # The run that took the timer's event links to the firing that stored it.
    assert (fired["traceId"], fired["spanId"]) in linked(run_of(timer_event.id))


def ingested_counts(folder: Path) -> dict[tuple[str, str], int]:
    """The agent_console.events.ingested counter's last value per (source, verdict) in the local file."""
    counts: dict[tuple[str, str], int] = {}
    for line in telemetry.file_path(folder).read_text().splitlines():
        request = json.loads(line)
        for resource in request.get("resourceMetrics", []):
            for scope in resource.get("scopeMetrics", []):
                for metric in scope.get("metrics", []):
                    if metric["name"] != "agent_console.events.ingested":
                        continue
                    for point in metric["sum"]["dataPoints"]:
                        attrs = telemetry.attributes_of(point)
                        key = (attrs["agent_console.event.source"], attrs["agent_console.ingest.verdict"])
                        counts[key] = int(point["asInt"])
    return counts


async def test_each_delivery_is_counted_once_by_source_and_verdict(tmp_path: Path) -> None:
    # The writer adds a group's verdicts to the counter once per source and verdict: the sum is still one a delivery.
    telemetry.configure(tmp_path)
    receiver = build_receiver(webhook_settings(tmp_path / "inbox.db"), clock=ManualClock(NOW), environ=secrets_env())
    await receiver.start()
    try:
        async with aiohttp.ClientSession() as http:
            async def deliver(source: str, key: str) -> int:
                kind = SOURCES[source]
                body = body_for(kind, key)
                async with http.post(f"{receiver.url}/hooks/{source}", data=body,
                                     headers=sign(kind, body, now=NOW, delivery_id=key)) as response:
                    return response.status

            first = await asyncio.gather(*(deliver("home", f"h-{n}") for n in range(5)), deliver("github", "g-1"))
            again = await asyncio.gather(deliver("home", "h-0"), deliver("home", "h-1"))
        assert first == [200] * 6 and again == [200, 200]
    finally:
        await receiver.stop()
        telemetry.flush()
        telemetry.configure(None, enabled=False)
    assert ingested_counts(tmp_path) == {("home", "stored"): 5, ("github", "stored"): 1, ("home", "duplicate"): 2}


def test_a_request_span_is_the_service_span_it_replaces_and_keeps_its_context(tmp_path: Path) -> None:
    # The receiver's span of a delivery is started without becoming the current span: the same span as
    # service_span(..., kind="SERVER") gave, and the same context kept as context_to_keep gave inside it.
    telemetry.configure(tmp_path)
    try:
        sender = f"00-{SENDER_TRACE}-{SENDER_SPAN}-01"
        with telemetry.request_span("ingest home", {"agent_console.event.source_id": "traced"}, sender=sender) as span:
            span.set("agent_console.ingest.verdict", "stored")
            traced_keep = span.keep
        with telemetry.request_span("ingest home", {"agent_console.event.source_id": "own"}, sender=None) as span:
            own_keep = span.keep
        with pytest.raises(RuntimeError), telemetry.request_span("ingest home", {}, sender=None):
            raise RuntimeError("the inbox went away")
        with telemetry.service_span("ingest home", {"agent_console.event.source_id": "old"}, parent=sender,
                                    kind="SERVER"):
            old_keep = telemetry.context_to_keep(parent=True)
        assert telemetry.traceparent() is None  # none of them is left as the current span
        telemetry.flush()
    finally:
        telemetry.configure(None, enabled=False)
    spans = {telemetry.attributes_of(s).get("agent_console.event.source_id"): s for s in telemetry.read_spans(tmp_path)}
    traced, own, failed, old = spans["traced"], spans["own"], spans[None], spans["old"]
    for span in (traced, own, failed):
        assert (span["name"], span["kind"]) == (old["name"], old["kind"]) == ("ingest home", 2)
    assert (traced["traceId"], traced["parentSpanId"]) == (old["traceId"], old["parentSpanId"]) == (SENDER_TRACE,
                                                                                                     SENDER_SPAN)
    assert telemetry.attributes_of(traced)["agent_console.ingest.verdict"] == "stored"
    assert traced_keep == f"00-{SENDER_TRACE}-{traced['spanId']}-01"
    assert old_keep == f"00-{SENDER_TRACE}-{old['spanId']}-01"
    assert not own.get("parentSpanId") and own["traceId"] != SENDER_TRACE
    assert own_keep is not None and own_keep.startswith(f"link 00-{own['traceId']}-{own['spanId']}-")  # a link only
    assert telemetry.attributes_of(failed)["error.type"] == "RuntimeError" and failed["status"]["code"] == 2


def test_a_request_span_with_telemetry_off_keeps_nothing(tmp_path: Path) -> None:
    telemetry.configure(tmp_path, enabled=False)
    with telemetry.request_span("ingest home", {}, sender=f"00-{SENDER_TRACE}-{SENDER_SPAN}-01") as span:
        span.set("agent_console.ingest.verdict", "stored")
    assert span.keep is None and not telemetry.file_path(tmp_path).exists()
