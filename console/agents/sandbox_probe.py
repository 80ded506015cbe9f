"""Run inside an MCP server's sandbox by `agent-console doctor` (console/agents/doctor.py), in the server's place:
reports what it can see, write and reach, as one JSON line on stdout.

Standalone, the standard library only: the doctor runs it as `python -I -S -c SOURCE PLAN`, PLAN a JSON object
{"hidden": [paths], "shown": [paths], "writable": [paths], "read_only": [paths], "proxy": "127.0.0.1:PORT"}.
"""

import json
import os
import socket
import sys


def _seen(path: str, shown: list[str]) -> str:
    """What is left to read of a hidden place: its files, outside the folders shown again inside it (read_paths,
    the engine's Python, the data_dir), whose mount points are the only folders a hidden place has."""
    try:
        if os.path.isdir(path):
            found = []
            for folder, folders, files in os.walk(path):
                folders[:] = [name for name in folders if os.path.join(folder, name) not in shown]
                # a hidden file is /dev/null bound over it: not a regular file
                found += [os.path.join(folder, name) for name in files if os.path.isfile(os.path.join(folder, name))]
                if len(found) > 100:
                    break
            return f"{len(found)} files, e.g. {found[0]}" if found else "no files"
        with open(path, "rb") as handle:
            return f"{len(handle.read(4096))} bytes"
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"


def _writes(folder: str) -> bool:
    probe = os.path.join(folder, ".agent-console-doctor")
    try:
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write("probe")
        os.unlink(probe)
        return True
    except OSError:
        return False


def _connects(host: str, port: int) -> str:
    try:
        with socket.create_connection((host, port), timeout=3):
            return "connected"
    except OSError as exc:
        return f"failed ({exc.strerror or exc})"


def _proxy(address: str) -> str:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(b"CONNECT doctor.invalid:443 HTTP/1.1\r\nHost: doctor.invalid:443\r\n\r\n")
            return sock.recv(200).decode("latin-1").split("\r\n", 1)[0] or "closed"
    except OSError as exc:
        return f"failed ({exc.strerror or exc})"


def main() -> None:
    plan = json.loads(sys.argv[1])
    report = {
        "hidden": {path: _seen(path, plan["shown"]) for path in plan["hidden"]},
        "writable": {path: _writes(path) for path in plan["writable"]},
        "read_only": {path: not _writes(path) for path in plan["read_only"]},
        "env": sorted(os.environ),
        "direct": {"1.1.1.1:443": _connects("1.1.1.1", 443), "127.0.0.1:22": _connects("127.0.0.1", 22)},
        "proxy": _proxy(plan["proxy"]),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
