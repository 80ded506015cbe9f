"""Runs first inside an MCP server's sandbox (console/agents/sandbox.py): listens on 127.0.0.1:PORT, the address
HTTP_PROXY names, then becomes the server's own command; a forked copy carries each connection to the engine's
egress proxy through the Unix socket bound into the sandbox. The sandbox's network has only loopback, so this is
its one way out, and the proxy decides where it leads.

Standalone on purpose: run as `python -I -S sandbox_forward.py SOCKET PORT COMMAND [ARG...]` with the engine's
interpreter and only the standard library, nothing of the console or the owner's site-packages. The copy ends
with the sandbox: when the server's process ends, bubblewrap's PID namespace ends and takes it along.
"""

import contextlib
import os
import socket
import sys
import threading


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (target, source):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _carry(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _address = listener.accept()
        threading.Thread(target=_carry, args=(client, path), daemon=True).start()


def main() -> None:
    path, port, command = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    if os.fork() == 0:
        # The copy lets go of the server's stdin, stdout and stderr: the engine reads their end of file as the
        # server's end, which a copy holding them would put off.
        null = os.open(os.devnull, os.O_RDWR)
        for descriptor in (0, 1, 2):
            os.dup2(null, descriptor)
        try:
            _serve(listener, path)
        finally:
            sys.exit(0)  # nothing to flush or clean up: a standalone script
    listener.close()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"cannot start {command[0]}: {exc.strerror}", file=sys.stderr)
        sys.exit(127)


if __name__ == "__main__":
    main()
