"""`agent-console doctor` (issue 33): can this machine run the MCP servers in their sandboxes? One line each for
bubblewrap, user namespaces, the egress proxy, and each configured stdio server: started in its sandbox with a probe
in its place (console/agents/sandbox_probe.py) that lists what it can see, write and reach, then started for real
through the hub. A failed check makes the command exit 2; a server with sandbox = false is a warning."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from console.agents.egress import EgressProxy
from console.agents.mcp import McpHub
from console.agents.mcp_config import McpServerConfig, expand_env, parse_mcp_servers
from console.agents.sandbox import (
    PROXY_PORT,
    SandboxPlaces,
    SandboxUnavailable,
    check_sandbox,
    engine_python,
    find_bwrap,
    launch,
    places_for,
    prepare_data_dir,
    userns_facts,
)
from console.config import ConfigError, Settings

PROBE = Path(__file__).with_name("sandbox_probe.py")
_PROBE_TIMEOUT = 60.0
_HIDDEN_SEEN = ("absent", "no files", "0 bytes")


@dataclass(frozen=True)
class Check:
    verdict: Literal["ok", "FAIL", "warn"]
    what: str
    said: str


def run_doctor(settings: Settings, env: Mapping[str, str] | None = None) -> list[Check]:
    """Every check, in order (bubblewrap, user namespaces, the proxy, each stdio server)."""
    env = os.environ if env is None else env
    for name in ("console.agents.mcp", "console.agents.egress"):  # the lines below say it, once
        logging.getLogger(name).setLevel(logging.ERROR)
    places = places_for(settings, env)
    servers = parse_mcp_servers(settings.mcp_servers) if settings.mcp_servers is not None else {}
    checks = [_bubblewrap(env)]
    namespaces = _namespaces(env)
    checks.append(namespaces)
    checks += asyncio.run(_proxy_and_probes(servers, places, env, sandbox_works=namespaces.verdict == "ok"))
    stdio = {name: config for name, config in servers.items() if config.transport == "stdio"}
    if stdio:
        checks += _started(stdio, places, env)
    return checks


def _bubblewrap(env: Mapping[str, str]) -> Check:
    bwrap = find_bwrap(env)
    if bwrap is None:
        return Check("FAIL", "bubblewrap", "bwrap is not installed: apt install bubblewrap (dnf install bubblewrap)")
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10,
                                 check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("FAIL", "bubblewrap", f"{bwrap} does not run: {exc}")
    return Check("ok", "bubblewrap", f"{bwrap} ({version or 'version unknown'})")


def _namespaces(env: Mapping[str, str]) -> Check:
    try:
        check_sandbox("NAME", env)
    except SandboxUnavailable as exc:
        return Check("FAIL", "user namespaces", f"{exc} ({userns_facts()})")
    return Check("ok", "user namespaces", f"a sandbox starts ({userns_facts()})")


async def _proxy_and_probes(servers: Mapping[str, McpServerConfig], places: SandboxPlaces, env: Mapping[str, str],
                            *, sandbox_works: bool) -> list[Check]:
    refused: list[tuple[str, str]] = []
    proxy = EgressProxy(on_refused=lambda server, host: refused.append((server, host)))
    try:
        checks = [await _proxy(proxy, refused)]
        for config in servers.values():
            if config.transport != "stdio":
                continue
            if not config.sandbox:
                checks.append(Check("warn", f"server {config.name}", "runs bare (sandbox = false): with your full "
                                                                      "authority, no probe"))
            elif sandbox_works:
                checks.append(await _probe(config, proxy, places, env))
        return checks
    finally:
        await proxy.close()


async def _proxy(proxy: EgressProxy, refused: list[tuple[str, str]]) -> Check:
    path = await proxy.open_for("doctor", ())
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(path)), 10)
        writer.write(b"CONNECT doctor.invalid:443 HTTP/1.1\r\n\r\n")
        await writer.drain()
        answer = (await asyncio.wait_for(reader.readline(), 10)).decode("latin-1").strip()
        writer.close()
    except (OSError, TimeoutError) as exc:
        return Check("FAIL", "egress proxy", f"no answer on its socket: {exc}")
    if not answer.startswith("HTTP/1.1 403") or refused != [("doctor", "doctor.invalid:443")]:
        return Check("FAIL", "egress proxy", f"a host not allowed was not refused: {answer or 'no answer'}")
    return Check("ok", "egress proxy", "answers on a Unix socket per server and refuses hosts not allowed (403)")


async def _probe(config: McpServerConfig, proxy: EgressProxy, places: SandboxPlaces,
                 env: Mapping[str, str]) -> Check:
    what = f"server {config.name}"
    try:
        bwrap = await asyncio.to_thread(check_sandbox, config.name, env)
        data_dir = prepare_data_dir(config, places)
        server_env = {key: expand_env(value, env, setting=f"mcp_servers.{config.name}.env.{key}")
                      for key, value in config.env.items()}
    except (SandboxUnavailable, ConfigError, OSError) as exc:
        return Check("FAIL", what, str(exc))
    homes = [str(home) for home in places.homes]
    hidden = [*homes, *(str(home / ".ssh") for home in places.homes), *(str(path) for path in places.hidden)]
    shown = [str(path) for path in (*engine_python(), *config.read_paths, data_dir)]
    plan = {"hidden": [path for path in hidden if Path(path).exists()], "shown": shown,
            "writable": [str(data_dir), "/tmp"],
            "read_only": ["/", "/etc", *homes], "proxy": f"127.0.0.1:{PROXY_PORT}"}
    probe = dataclasses.replace(config, command=os.path.realpath(sys.executable),
                                args=("-I", "-S", "-c", PROBE.read_text(encoding="utf-8"), json.dumps(plan)))
    socket = await proxy.open_for(config.name, config.allow_hosts)
    spawn = launch(probe, bwrap=bwrap, places=places, data_dir=data_dir, socket=socket, server_env=server_env,
                   engine_env=env)
    err = b""
    try:
        process = await asyncio.create_subprocess_exec(
            spawn.command, *spawn.args, env=spawn.env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(process.communicate(), _PROBE_TIMEOUT)
        report = json.loads(out.decode("utf-8"))
    except (OSError, TimeoutError, ValueError) as exc:
        said = " ".join(err.decode("utf-8", "replace").split())[:200]
        return Check("FAIL", what, f"the probe did not run in its sandbox: {said or exc}")
    return _judge(what, report, config, data_dir)


def _judge(what: str, report: dict[str, object], config: McpServerConfig, data_dir: Path) -> Check:
    hidden = report.get("hidden") or {}
    writable = report.get("writable") or {}
    read_only = report.get("read_only") or {}
    direct = report.get("direct") or {}
    problems = []
    assert isinstance(hidden, dict) and isinstance(writable, dict) and isinstance(read_only, dict)
    assert isinstance(direct, dict)
    problems += [f"sees {path} ({seen})" for path, seen in hidden.items()
                 if seen not in _HIDDEN_SEEN and not str(seen).startswith("unreadable")]
    problems += [f"cannot write {path}" for path, ok in writable.items() if not ok]
    problems += [f"can write {path}" for path, ok in read_only.items() if not ok]
    problems += [f"reaches {target} around the proxy" for target, said in direct.items() if said == "connected"]
    proxy = str(report.get("proxy", ""))
    if not proxy.startswith("HTTP/1.1 403"):
        problems.append(f"the proxy: {proxy or 'no answer'}")
    if problems:
        return Check("FAIL", what, "in its sandbox it " + "; ".join(problems))
    hosts = ", ".join(config.allow_hosts) or "none"
    shown = ", ".join(str(path) for path in config.read_paths) or "none"
    return Check("ok", what, f"in its sandbox: writes only {data_dir} and its /tmp; hidden: {len(hidden)} places "
                             f"(home, .ssh, inbox, config, secrets); read_paths: {shown}; network: only the "
                             f"proxy (allow_hosts: {hosts})")


def _started(servers: Mapping[str, McpServerConfig], places: SandboxPlaces, env: Mapping[str, str]) -> list[Check]:
    hub = McpHub(servers, env=env, places=places)
    hub.start()
    try:
        status = hub.status()
    finally:
        hub.close()
    checks = []
    for name, config in servers.items():
        said = status.get(name, "down: not started")
        box = "in its sandbox" if config.sandbox else "bare"
        if said == "up":
            checks.append(Check("ok" if config.sandbox else "warn", f"server {name} start", f"up {box}"))
        else:
            reason = said.removeprefix("down: ").rsplit("; retrying in ", 1)[0]
            checks.append(Check("FAIL", f"server {name} start", f"does not start {box}: {reason}"))
    return checks

