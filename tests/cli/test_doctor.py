"""`agent-console doctor` (issue 33): one line each for bubblewrap, user namespaces, the egress proxy and each
stdio server started in its sandbox with a probe in its place; exit 2 when a check fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from console.agents.doctor import _judge
from console.agents.mcp_config import McpServerConfig

ROOT = Path(__file__).resolve().parents[2]


def doctor(tmp_path: Path, path: str) -> subprocess.CompletedProcess[str]:
    secrets = tmp_path / "secrets.env"
    secrets.write_text("TELEGRAM_TOKEN=secret\n", encoding="utf-8")
    config = tmp_path / "config.toml"
    config.write_text("\n".join([
        "[mcp_servers.shop]", f"command = {json.dumps(sys.executable)}",
        'args = ["-m", "console.examples.shop_server"]', f"read_paths = [{json.dumps(str(ROOT))}]",
        'allow_hosts = ["api.example.org"]', "connect_timeout = 60",
        "[mcp_servers.legacy]", f"command = {json.dumps(sys.executable)}",
        'args = ["-m", "console.examples.shop_server"]', "sandbox = false", "connect_timeout = 60",
        "[webhooks]", f"secrets_file = {json.dumps(str(secrets))}", ""]), encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=path, HOME=str(tmp_path / "home"),
               XDG_DATA_HOME=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "xdg-config"))
    return subprocess.run([sys.executable, "-m", "console", "--config", str(config), "--db",
                           str(tmp_path / "inbox" / "inbox.db"), "doctor"], env=env, capture_output=True, text=True,
                          timeout=180, check=False)


def test_a_machine_that_can_sandbox_passes_with_a_line_per_check(tmp_path: Path) -> None:
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "home" / ".ssh" / "id_rsa").write_text("planted", encoding="utf-8")

    done = doctor(tmp_path, os.environ["PATH"])

    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split()[:2] for line in lines[:3]] == [["ok", "bubblewrap"], ["ok", "user"], ["ok", "egress"]]
    shop = next(line for line in lines if line.split()[1:3] == ["server", "shop"] and "start" not in line)
    assert shop.startswith("ok") and "network: only the proxy (allow_hosts: api.example.org)" in shop
    assert any(line.startswith("warn") and "legacy" in line and "runs bare (sandbox = false)" in line
               for line in lines)
    assert any(line.split()[:4] == ["ok", "server", "shop", "start"] for line in lines)


def test_a_machine_without_user_namespaces_fails_with_what_to_do(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\n[ \"$1\" = --version ] && { echo 'bubblewrap 0.8.0'; exit 0; }\n"
                                "echo 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n",
                                encoding="utf-8")
    (fake / "bwrap").chmod(0o755)

    done = doctor(tmp_path, f"{fake}:{os.environ['PATH']}")

    assert done.returncode == 2, done.stdout + done.stderr
    namespaces = next(line for line in done.stdout.splitlines() if "user namespaces" in line)
    assert namespaces.startswith("FAIL") and "No permissions to creating new namespace" in namespaces
    assert "sysctl kernel.unprivileged_userns_clone=1" in namespaces
    assert any(line.startswith("FAIL") and "shop start" in line and "the sandbox cannot start" in line
               for line in done.stdout.splitlines())
    assert "Traceback" not in done.stderr


def test_a_probe_that_saw_a_hidden_file_or_reached_around_the_proxy_fails() -> None:
    config = McpServerConfig("shop", command="x")
    report = {"hidden": {"/home/ada": "2 files, e.g. /home/ada/.ssh/id_rsa", "/home/ada/.ssh": "no files"},
              "writable": {"/data": True}, "read_only": {"/etc": True},
              "direct": {"1.1.1.1:443": "connected"}, "proxy": "HTTP/1.1 403 Forbidden"}

    check = _judge("server shop", report, config, Path("/data"))

    assert check.verdict == "FAIL"
    assert check.said == ("in its sandbox it sees /home/ada (2 files, e.g. /home/ada/.ssh/id_rsa); reaches "
                          "1.1.1.1:443 around the proxy")
