"""Throwaway mail servers for the e-mail source's tests (issue 23): Dovecot for IMAP (Debian's dovecot-imapd,
started from a temporary config on 127.0.0.1 with a passwd-file user and a maildir in a temp folder, TLS with a
certificate made for the test) and aiosmtpd as the SMTP server that receives the replies (STARTTLS, AUTH).

Mail is delivered by IMAP APPEND, as the owner's server would after adding its Authentication-Results header.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import imapclient
import psutil
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from tests.support import wait_until

MAIL_USER = "owner@example.org"
MAIL_PASSWORD = "correct horse battery staple"
MAIL_UID_NAME = "nobody"   # Dovecot refuses to keep mail as root
PORT_TRIES = 3
SMTP_USER, SMTP_PASSWORD = "agent-sender", "smtp secret"


class DovecotMissing(RuntimeError):
    pass


def _children(process: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return process.children()
    return []


def _title(process: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        return " ".join(process.cmdline())
    return ""  # gone


def _ended(process: psutil.Process) -> bool:
    """Exited (a zombie counts: the master reaps its children only between its own waits)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 / localhost: the CA file the client is given (ca_file)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@dataclass
class Dovecot:
    folder: Path
    port: int
    cert: Path
    key: Path
    starttls_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # "settings": more lines for dovecot.conf

    @property
    def config(self) -> Path:
        return self.folder / "dovecot.conf"

    def write_config(self) -> None:
        # As root, Dovecot keeps the mail as an unprivileged user; as anyone else, everything runs as that user.
        root = os.geteuid() == 0
        user = pwd.getpwnam(MAIL_UID_NAME) if root else pwd.getpwuid(os.geteuid())
        (self.folder / "passwd").write_text(f"{MAIL_USER}:{{PLAIN}}{MAIL_PASSWORD}::::::\n")
        for sub in ("run", "state", "home"):
            (self.folder / sub).mkdir(exist_ok=True)
        if root:
            os.chown(self.folder / "home", user.pw_uid, user.pw_gid)
        as_user = "" if root else (f"default_internal_user = {user.pw_name}\ndefault_login_user = {user.pw_name}\n"
                                   f"first_valid_uid = {user.pw_uid}\n")
        self.config.write_text(as_user + f"""
base_dir = {self.folder}/run
state_dir = {self.folder}/state
log_path = {self.folder}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = required
ssl_cert = <{self.cert}
ssl_key = <{self.key}
auth_mechanisms = plain login
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {self.folder}/passwd
}}
userdb {{
  driver = static
  args = uid={user.pw_uid} gid={user.pw_gid} home={self.folder}/home/%u
}}
mail_location = maildir:~/Maildir
{self.extra.get("settings", "")}
namespace inbox {{
  inbox = yes
  separator = /
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.starttls_port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {self.port}
    ssl = yes
  }}
}}
service anvil {{
  chroot =
}}
service imap-login {{
  chroot =
}}
""")
        os.chmod(self.folder, 0o755)

    def start(self) -> None:
        self.write_config()
        binary = shutil.which("dovecot") or "/usr/sbin/dovecot"
        self.process = subprocess.Popen([binary, "-F", "-c", str(self.config)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.05)
        log = (self.folder / "dovecot.log")
        raise RuntimeError("dovecot did not start: " + (log.read_text()[-2000:] if log.exists() else "no log"))

    def stop(self) -> None:
        """Stop the server as a restart does, in the order Dovecot's own shutdown ends with (shutdown_clients):
        each IMAP session is told BYE and its connection closed, then every process exits. Left to itself, the
        master first waits up to 6 s for its helpers (MAX_DIE_WAIT_MSECS, then a second after SIGQUIT), sessions
        still up: a stop took 1-6 s, long after the point of a restart. Here the master is told to stop (SIGTERM:
        it starts no more), the sessions are ended (SIGTERM), and once every client connection they had is closed
        (imap-login relays the TLS, the BYE with it) the rest of its processes are told to stop too."""
        process = self.process
        if process is not None and process.poll() is None:
            master = psutil.Process(process.pid)
            clients = self._client_connections()
            process.send_signal(signal.SIGTERM)
            sessions = [child for child in _children(master) if _title(child) == "dovecot/imap"]
            for session in sessions:
                with contextlib.suppress(psutil.Error):
                    session.terminate()
            wait_until(lambda: all(_ended(session) for session in sessions)
                       and not clients & self._client_connections(), "the sessions told BYE and closed", limit=10,
                       interval=0.01)
            deadline = time.monotonic() + 10
            while process.poll() is None and time.monotonic() < deadline:
                for child in _children(master):  # again: one it started before it saw its own SIGTERM
                    with contextlib.suppress(psutil.Error):
                        if child.status() != psutil.STATUS_ZOMBIE:
                            child.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(0.02)
            if process.poll() is None:
                process.kill()
                process.wait(5)
        self.process = None

    def _client_connections(self) -> set[tuple[str, int]]:
        """The clients connected to this server (their addresses), as its side of each connection sees them."""
        ports = {self.port, self.starttls_port}
        return {(c.raddr.ip, c.raddr.port) for c in psutil.net_connections("tcp4")
                if c.laddr and c.laddr.port in ports and c.raddr and c.status == psutil.CONN_ESTABLISHED}

    def remove(self) -> None:
        """Gone for good: nothing starts on this folder again, so the processes are killed, not stopped in order."""
        process = self.process
        if process is not None and process.poll() is None:
            helpers = _children(psutil.Process(process.pid))
            process.kill()
            for helper in helpers:
                with contextlib.suppress(psutil.Error):
                    helper.kill()
            process.wait(5)
        self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)

    def client(self) -> imapclient.IMAPClient:
        context = ssl.create_default_context(cafile=str(self.cert))
        client = imapclient.IMAPClient("127.0.0.1", port=self.port, ssl=True, ssl_context=context, timeout=10)
        client.login(MAIL_USER, MAIL_PASSWORD)
        return client

    def append(self, *messages: bytes | EmailMessage, folder: str = "INBOX") -> None:
        client = self.client()
        try:
            for message in messages:
                client.append(folder, message if isinstance(message, bytes) else bytes(message))
        finally:
            client.logout()

    def email_settings(self, **extra: Any) -> dict[str, Any]:
        """An [email] table for this server."""
        table: dict[str, Any] = {"imap_host": "127.0.0.1", "imap_port": self.port, "tls": "implicit",
                                 "ca_file": str(self.cert), "user": MAIL_USER, "password_env": "MAIL_TEST_PASSWORD",
                                 "trusted_senders": [MAIL_USER], "authserv_id": "mx.example.org"}
        table.update(extra)
        return table


_certificate: tuple[bytes, bytes] | None = None


def _server_certificate(folder: Path) -> tuple[Path, Path]:
    """The servers' certificate, made once per test process and copied into each server's folder (an RSA key
    costs most of a second of CPU to make). A test that needs another CA makes one with make_certificate."""
    global _certificate
    if _certificate is None:
        with tempfile.TemporaryDirectory() as made:
            cert, key = make_certificate(Path(made))
            _certificate = cert.read_bytes(), key.read_bytes()
    cert, key = folder / "cert.pem", folder / "key.pem"
    cert.write_bytes(_certificate[0])
    key.write_bytes(_certificate[1])
    key.chmod(0o600)
    return cert, key


def start_dovecot(settings: str = "") -> Dovecot:
    """A server in a folder of its own under the system's temp folder (Dovecot's unprivileged processes must
    reach its files, which pytest's owner-only tmp_path does not allow); Dovecot.remove() deletes it."""
    if not (shutil.which("dovecot") or Path("/usr/sbin/dovecot").exists()):
        raise DovecotMissing("dovecot not found: install dovecot-imapd to run these tests")
    folder = Path(tempfile.mkdtemp(prefix="dovecot-"))
    cert, key = _server_certificate(folder)
    for attempt in range(PORT_TRIES):  # a free port can be taken by another test's server before Dovecot binds it
        server = Dovecot(folder=folder, port=free_port(), cert=cert, key=key, starttls_port=free_port(),
                         extra={"settings": settings})
        try:
            server.start()
            return server
        except RuntimeError:
            server.stop()
            if attempt == PORT_TRIES - 1:
                shutil.rmtree(folder, ignore_errors=True)
                raise
    raise AssertionError("unreachable")


def mail(subject: str, text: str, *, sender: str = MAIL_USER, authenticated: bool = True,
         authserv_id: str = "mx.example.org", headers: dict[str, str] | None = None,
         message_id: str | None = None) -> EmailMessage:
    """A message as the owner's server would store it: with its Authentication-Results when it checked it."""
    message = EmailMessage()
    if authenticated:
        domain = sender.rsplit("@", 1)[1]
        message["Authentication-Results"] = (f"{authserv_id}; dkim=pass header.d={domain}; spf=pass "
                                             f"smtp.mailfrom={domain}; dmarc=pass header.from={domain}")
    message["From"] = sender
    message["To"] = "agent@example.org"
    message["Subject"] = subject
    message["Message-ID"] = message_id or f"<{abs(hash((subject, text, time.time_ns())))}@{sender.split('@')[1]}>"
    message["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
    for name, value in (headers or {}).items():
        message[name] = value
    message.set_content(text)
    return message


class Received:
    """What the SMTP server was given: every message offered (refused ones too) and those it accepted."""

    def __init__(self, refuse_first: int = 0) -> None:
        self.messages: list[EmailMessage] = []
        self.offered: list[EmailMessage] = []
        self.refuse_first = refuse_first
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.original_content, policy=policy.default)
        with self.lock:
            self.offered.append(message)  # type: ignore[arg-type]
            if len(self.offered) <= self.refuse_first:
                return "451 4.3.0 try again later"
            self.messages.append(message)  # type: ignore[arg-type]
        return "250 OK"


def _authenticate(server: Any, session: Any, envelope: Any, mechanism: str, data: Any) -> AuthResult:
    ok = isinstance(data, LoginPassword) and (data.login, data.password) == (SMTP_USER.encode(), SMTP_PASSWORD.encode())
    return AuthResult(success=ok)


def start_smtp(server: Dovecot, received: Received) -> Controller:
    """aiosmtpd on 127.0.0.1 recording into `received`: STARTTLS required (the Dovecot's certificate), AUTH as
    SMTP_USER / SMTP_PASSWORD. Stop it with .stop()."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(server.cert), str(server.key))
    controller = Controller(received, hostname="127.0.0.1", port=free_port(), tls_context=context,
                            require_starttls=True, authenticator=_authenticate, auth_require_tls=True)
    controller.start()
    return controller


def smtp_settings(controller: Controller) -> dict[str, Any]:
    """The [email] keys that send replies through `controller` (its password in SMTP_TEST_PASSWORD)."""
    return {"smtp_host": "127.0.0.1", "smtp_port": controller.port, "smtp_user": SMTP_USER,
            "smtp_password_env": "SMTP_TEST_PASSWORD", "from_address": "agent@example.org"}


class HoldingProxy:
    """A TLS proxy between the engine and Dovecot that holds back the first command matching `hold` (not forwarded
    unless released): the test sees the engine reach that step and can kill it there, for real, or change the
    world around it and then let it go on (release())."""

    def __init__(self, server: Dovecot, hold: bytes) -> None:
        self.server = server
        self.hold = hold
        self.port = free_port()
        self.holding = True
        self.held: asyncio.Event | None = None
        self._released: asyncio.Event | None = None
        self.commands: list[bytes] = []  # every command line the engine sent, in order
        self._server: asyncio.AbstractServer | None = None
        self._clients: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self.held = asyncio.Event()
        self._released = asyncio.Event()
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(self.server.cert), str(self.server.key))
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, ssl=context)

    def release(self) -> None:
        """Forward the held command now, and hold nothing more."""
        assert self._released is not None
        self._released.set()

    def cut(self) -> None:
        """Drop every engine's connection, as a crashed server does: no BYE, no TLS goodbye, the TCP stream closed."""
        for writer in self._clients:
            writer.transport.abort()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients.append(writer)
        context = ssl.create_default_context(cafile=str(self.server.cert))
        upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.server.port, ssl=context,
                                                                         server_hostname="127.0.0.1")

        async def client_to_server() -> None:
            while line := await reader.readline():
                self.commands.append(line)
                if self.holding and self.hold in line.upper():
                    assert self.held is not None and self._released is not None
                    self.held.set()
                    await self._released.wait()  # held until released (never, unless the test says)
                    self.holding = False
                upstream_writer.write(line)
                await upstream_writer.drain()

        async def server_to_client() -> None:
            while data := await upstream_reader.read(65536):
                writer.write(data)
                await writer.drain()

        pumps = [asyncio.create_task(client_to_server()), asyncio.create_task(server_to_client())]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        except Exception:
            pass
        finally:
            for pump in pumps:
                pump.cancel()
            for side in (writer, upstream_writer):
                side.close()
