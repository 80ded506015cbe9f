"""The sandbox a stdio MCP server runs in (issue 33; docs/security.md "Tools in a box").

On Linux each stdio server starts under bubblewrap (`bwrap`): the root file system read-only, its own /tmp, /run,
/proc and /dev, its own user, PID, IPC, UTS and network namespaces (the network has only loopback), no
capabilities, no new privileges, a new session, killed with the engine. The owner's home, the inbox's folder, the
config folder and the secrets file are hidden (empty); the folders named in `read_paths` are shown again read-only,
but never ~/.ssh, the inbox, the config or the secrets. One folder is writable: the server's `data_dir`, which is
also its HOME. Its environment holds only what its `env` table names, PATH and LANG, and the proxy settings.

Its only way out is the engine's egress proxy (console/agents/egress.py), reached through a Unix socket bound into
the sandbox; inside, a small forwarder (console/agents/sandbox_forward.py, run before the server's own command)
listens on 127.0.0.1 and carries each connection to that socket, so HTTP_PROXY/HTTPS_PROXY can point at it.

The sandbox fails closed: when bwrap is missing or cannot make its namespaces (user namespaces off, an AppArmor
restriction), the server is not started and the reason says what to do. `sandbox = false` runs it bare.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from console.agents.mcp_config import McpServerConfig
from console.config import APP_NAME, Settings, default_config_path

# Inside the sandbox: where the forwarder and the proxy's socket are bound, and the port the forwarder listens on
# (the network namespace is the server's own, so any port is free).
INSIDE = Path("/run/agent-console")
INSIDE_SOCKET = INSIDE / "egress.sock"
INSIDE_FORWARDER = INSIDE / "forward.py"
PROXY_PORT = 3128
FORWARDER = Path(__file__).with_name("sandbox_forward.py")
_CHECK_TIMEOUT = 10.0
# What the MCP SDK passes to every server whatever its env says (mcp.client.stdio.DEFAULT_INHERITED_ENV_VARS):
# unset again inside the sandbox unless the server's env names them.
_SDK_INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
_KEPT_FROM_ENGINE = ("PATH", "LANG")

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap), "
                "or set sandbox = false in [mcp_servers.{name}] to run it bare")
USERNS_HINT = ("allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; Ubuntu: "
               "kernel.apparmor_restrict_unprivileged_userns=0), or set sandbox = false in [mcp_servers.{name}] "
               "to run it bare")
OFF_LINUX = ("no sandbox exists for MCP servers on {platform} yet: set sandbox = false in [mcp_servers.{name}] "
             "to run it bare (docs/security.md)")


class SandboxUnavailable(Exception):
    """The sandbox cannot start here; str() says why and what to do. The server is not started."""


@dataclass(frozen=True)
class SandboxPlaces:
    """What the sandbox hides and where the servers' own folders go: from the settings (places_for), or a test's."""

    data_root: Path                  # a server's data_dir defaults to data_root / NAME
    homes: tuple[Path, ...]          # hidden but for read_paths; their .ssh always
    hidden: tuple[Path, ...]         # always hidden, even inside read_paths: the inbox, config and secrets

    def default_data_dir(self, server: str) -> Path:
        return self.data_root / server


def places_for(settings: Settings, env: Mapping[str, str] | None = None) -> SandboxPlaces:
    """The places for these settings: the servers' folders under the inbox's folder (mcp-data/NAME); hidden:
    the owner's home, the inbox's folder, the config file's folder and the default one, the secrets file."""
    env = os.environ if env is None else env
    inbox = settings.inbox_folder
    config_folder = default_config_path().parent
    secrets = settings.webhooks.get("secrets_file") if isinstance(settings.webhooks, dict) else None
    hidden = [inbox, config_folder, Path(platformdirs.user_data_dir(APP_NAME)), settings.instructions.parent]
    config_file = _config_file(settings)
    if config_file is not None:
        hidden.append(config_file.parent)
    if isinstance(secrets, str):
        hidden.append(Path(secrets).expanduser())
    return SandboxPlaces(data_root=inbox / "mcp-data", homes=owner_homes(env),
                         hidden=tuple(dict.fromkeys(Path(os.path.abspath(p)) for p in hidden)))


def default_places(env: Mapping[str, str] | None = None) -> SandboxPlaces:
    """The places without settings (a hub made on its own): the default inbox and config folders."""
    env = os.environ if env is None else env
    data = Path(platformdirs.user_data_dir(APP_NAME))
    return SandboxPlaces(data_root=data / "mcp-data", homes=owner_homes(env),
                         hidden=(data, default_config_path().parent))


def owner_homes(env: Mapping[str, str]) -> tuple[Path, ...]:
    """The owner's home as $HOME says and as the password database says (they may differ)."""
    homes = []
    if env.get("HOME"):
        homes.append(Path(os.path.abspath(env["HOME"])))
    with contextlib.suppress(KeyError):
        homes.append(Path(pwd.getpwuid(os.getuid()).pw_dir))
    return tuple(home for home in dict.fromkeys(homes) if home != Path("/"))


def _config_file(settings: Settings) -> Path | None:
    for origin in settings.origins.values():
        if origin.startswith("config file "):
            return Path(origin.removeprefix("config file "))
    return None


def find_bwrap(env: Mapping[str, str]) -> str | None:
    return shutil.which("bwrap", path=env.get("PATH", os.defpath))


def check_sandbox(name: str, env: Mapping[str, str]) -> str:
    """The path of a bwrap that can make the namespaces a server needs, or SandboxUnavailable saying why and what
    to do. Runs a sandbox around `true` (a few milliseconds), so a fixed machine is seen at the next attempt."""
    if not sys.platform.startswith("linux"):
        raise SandboxUnavailable(OFF_LINUX.format(platform=sys.platform, name=name))
    bwrap = find_bwrap(env)
    if bwrap is None:
        raise SandboxUnavailable(f"the sandbox cannot start: bubblewrap (bwrap) is not installed: "
                                 f"{INSTALL_HINT.format(name=name)}")
    probe = [bwrap, *_NAMESPACES, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, timeout=_CHECK_TIMEOUT, check=False,
                              env={"PATH": env.get("PATH", os.defpath)})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"the sandbox cannot start: {bwrap} failed: {exc}: "
                                 f"{INSTALL_HINT.format(name=name)}") from None
    if done.returncode != 0:
        said = " ".join(done.stderr.decode("utf-8", "replace").split())[:80] or f"exit status {done.returncode}"
        raise SandboxUnavailable(f"the sandbox cannot start: {said}: {USERNS_HINT.format(name=name)}")
    return bwrap


def userns_facts() -> str:
    """What this machine says about user namespaces, for a reason or `doctor`."""
    facts = []
    for setting in ("kernel/unprivileged_userns_clone", "user/max_user_namespaces",
                    "kernel/apparmor_restrict_unprivileged_userns"):
        try:
            value = Path("/proc/sys", setting).read_text(encoding="ascii").strip()
        except OSError:
            continue
        facts.append(f"{setting.replace('/', '.')}={value}")
    return ", ".join(facts) or "no user namespace settings readable"


_NAMESPACES = ("--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL")


@dataclass(frozen=True)
class SandboxLaunch:
    """What the hub hands the MCP SDK for a sandboxed server: bwrap, its arguments, and its environment."""

    command: str
    args: list[str]
    env: dict[str, str]


def data_dir_for(config: McpServerConfig, places: SandboxPlaces) -> Path:
    return config.data_dir if config.data_dir is not None else places.default_data_dir(config.name)


def prepare_data_dir(config: McpServerConfig, places: SandboxPlaces) -> Path:
    """The server's data_dir, created 0700 when missing; SandboxUnavailable when it would expose a hidden place."""
    folder = data_dir_for(config, places)
    for secret in (*places.hidden, *places.homes, *(home / ".ssh" for home in places.homes)):
        if (folder == secret or secret.is_relative_to(folder)) and secret.exists():
            raise SandboxUnavailable(f"mcp_servers.{config.name}.data_dir {folder} holds {secret}, which the "
                                     f"sandbox hides: give the server a folder of its own")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def launch(config: McpServerConfig, *, bwrap: str, places: SandboxPlaces, data_dir: Path, socket: Path,
           server_env: Mapping[str, str], engine_env: Mapping[str, str]) -> SandboxLaunch:
    """bwrap's arguments and environment for config's server. Values stay out of the arguments (a process's
    arguments are readable by every user of the machine): the environment carries them, and inside the sandbox
    the variables the SDK adds on its own are unset again."""
    assert config.command is not None
    args: list[str] = [*_NAMESPACES, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                       "--tmpfs", "/tmp", "--tmpfs", "/var/tmp", "--tmpfs", "/run"]
    # Hidden folders are empty and read-only: made as tmpfs, the outermost first (one made inside another first
    # would be covered by it), then read_paths shown again inside them, then what is never shown hidden again where
    # a read_path showed it; all remounted read-only at the end (the binds make their mount points in them before),
    # so nothing written there even seems to work.
    secrets = (*places.hidden, *(home / ".ssh" for home in places.homes))
    emptied = [Path("/run")]
    for folder in sorted(_outermost((*places.homes, *(s for s in secrets if s.is_dir()))), key=lambda p: len(p.parts)):
        args += ["--tmpfs", str(folder)]
        emptied.append(folder)
    shown = [*engine_python(), *config.read_paths]
    for path in dict.fromkeys(shown):
        args += ["--ro-bind-try", str(path), str(path)]
    for secret in secrets:
        if secret.is_dir() and any(secret.is_relative_to(path) for path in shown):
            args += ["--tmpfs", str(secret)]
            emptied.append(secret)
        elif secret.is_file():
            args += ["--ro-bind", "/dev/null", str(secret)]
    proxy = f"http://127.0.0.1:{PROXY_PORT}"
    env = {name: engine_env[name] for name in _KEPT_FROM_ENGINE if name in engine_env}
    env.setdefault("PATH", os.defpath)
    env |= {"HOME": str(data_dir), "HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy,
            "https_proxy": proxy, "ALL_PROXY": proxy, "all_proxy": proxy, "NO_PROXY": "", "no_proxy": ""}
    env |= dict(server_env)
    for name in _SDK_INHERITED:
        if name not in env:
            args += ["--unsetenv", name]
    args += ["--bind", str(data_dir), str(data_dir), "--chdir", str(data_dir),
             "--ro-bind", str(FORWARDER), str(INSIDE_FORWARDER), "--ro-bind", str(socket), str(INSIDE_SOCKET)]
    for folder in emptied:
        args += ["--remount-ro", str(folder)]
    args += ["--", os.path.realpath(sys.executable), "-I", "-S", str(INSIDE_FORWARDER), str(INSIDE_SOCKET),
             str(PROXY_PORT), config.command, *config.args]
    return SandboxLaunch(bwrap, args, env)


def _outermost(paths: tuple[Path, ...]) -> list[Path]:
    """paths without those inside another folder of them: hiding the folder hides them, and a mount made inside it
    first would be covered by it (and could not be remounted read-only after)."""
    return [path for path in dict.fromkeys(paths)
            if not any(path != other and path.is_relative_to(other) and other.is_dir() for other in paths)]


def engine_python() -> tuple[Path, ...]:
    """The engine's own Python installation, shown read-only in every sandbox even inside the owner's home (pyenv,
    a virtual environment): the forwarder runs on it, and servers written in Python often do too. Software, not
    the owner's data."""
    return tuple(dict.fromkeys(Path(p) for p in (sys.prefix, sys.base_prefix)))


def hidden_command(config: McpServerConfig, places: SandboxPlaces, path_env: str | None) -> str | None:
    """Why the server's command cannot be seen inside its sandbox (it, or what its link points to, lives in a
    hidden folder that read_paths does not show again), or None; FileNotFoundError when there is no such command."""
    assert config.command is not None
    found = shutil.which(config.command, path=path_env or os.defpath)
    if found is None:  # said as it would be bare, not as the forwarder inside the sandbox says it
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), config.command)
    shown = (*config.read_paths, *engine_python())
    never = (*places.hidden, *(home / ".ssh" for home in places.homes))
    unless_shown = (*places.homes, Path("/tmp"), Path("/var/tmp"), Path("/run"))
    for where in dict.fromkeys((Path(os.path.abspath(found)), Path(os.path.realpath(found)))):
        folder = next((f for f in never if where.is_relative_to(f)), None)
        if folder is None and not any(where.is_relative_to(path) for path in shown):
            folder = next((f for f in unless_shown if where.is_relative_to(f)), None)
        if folder is not None:
            return (f"the command {where} is in {folder}, which the sandbox hides: add its installation's folder "
                    f"to mcp_servers.{config.name}.read_paths")
    return None
