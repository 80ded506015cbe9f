"""Secrets from the environment or an owner-only KEY=VALUE file; [webhooks] errors name the setting."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from console.config import ConfigError
from console.edges.config import build_verifiers, parse_webhooks
from console.edges.secretfile import Secret, load_secrets_file
from console.edges.verifiers import GitHubVerifier

SECRET = "s3cr3t-value-9Q"


def secrets_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "secrets.env"
    path.write_text(text)
    path.chmod(mode)
    return path


def github_source(**extra: Any) -> dict[str, Any]:
    return {"sources": {"github": {"verifier": "github", "secret_env": "GH_SECRET"}}, **extra}


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660, 0o620])
def test_secrets_file_open_to_group_or_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = secrets_file(tmp_path, f"GH_SECRET={SECRET}\n", mode)
    with pytest.raises(ConfigError, match=rf"{path} has mode {mode:04o}.*chmod 600"):
        load_secrets_file(path)


def test_secrets_file_format(tmp_path: Path) -> None:
    path = secrets_file(tmp_path, f"""# webhook secrets
GH_SECRET={SECRET}

export STRIPE = "whsec_quoted value"
EMPTY=
""")
    found = load_secrets_file(path)
    assert {k: v.reveal() for k, v in found.items()} == {
        "GH_SECRET": SECRET, "STRIPE": "whsec_quoted value", "EMPTY": ""}


def test_secrets_file_error_names_the_line_not_its_content(tmp_path: Path) -> None:
    path = secrets_file(tmp_path, f"GH_SECRET={SECRET}\n{SECRET}\n")
    with pytest.raises(ConfigError, match=r"line 2: expected KEY=VALUE") as error:
        load_secrets_file(path)
    assert SECRET not in str(error.value)


def test_missing_secrets_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"webhooks\.secrets_file: .* does not exist"):
        load_secrets_file(tmp_path / "nope.env")


def test_environment_wins_over_the_file_and_the_file_fills_in(tmp_path: Path) -> None:
    path = secrets_file(tmp_path, "GH_SECRET=from-file\n")
    config = parse_webhooks(github_source(secrets_file=str(path)))
    from_file = build_verifiers(config, environ={})["github"]
    from_env = build_verifiers(config, environ={"GH_SECRET": SECRET})["github"]
    assert isinstance(from_file, GitHubVerifier) and isinstance(from_env, GitHubVerifier)
    assert from_file._key == b"from-file" and from_env._key == SECRET.encode()


def test_secret_never_shows_itself() -> None:
    secret = Secret(SECRET)
    for shown in (repr(secret), str(secret), f"{secret}", f"{secret!r}", repr([secret])):
        assert SECRET not in shown
    with pytest.raises(TypeError):
        pickle.dumps(secret)


def test_bad_standard_secret_error_does_not_echo_it() -> None:
    config = parse_webhooks({"sources": {"std": {"verifier": "standard", "secret_env": "STD"}}})
    with pytest.raises(ConfigError, match=r"webhooks\.sources\.std\.secret_env: STD: .*whsec_") as error:
        build_verifiers(config, environ={"STD": SECRET})
    assert SECRET not in str(error.value)


def test_defaults() -> None:
    config = parse_webhooks(github_source())
    assert (config.host, config.port, config.max_body_bytes) == ("127.0.0.1", 8765, 1024 * 1024)
    assert config.sources["github"].tolerance == 300
    assert config.enabled is False and parse_webhooks(github_source(enabled=True)).enabled is True


@pytest.mark.parametrize(("raw", "message"), [
    ({"prot": 1}, r"webhooks\.prot: unknown setting"),
    ({"enabled": "yes"}, r"webhooks\.enabled: expected true or false"),
    ({"port": "8765"}, r"webhooks\.port: expected a whole number"),
    ({"port": 70000}, r"webhooks\.port"),
    ({"max_body_bytes": 0}, r"webhooks\.max_body_bytes"),
    ({"sources": {"github": {"verifier": "gitlab", "secret_env": "X"}}}, r"webhooks\.sources\.github\.verifier"),
    ({"sources": {"github": {"verifier": "github"}}}, r"webhooks\.sources\.github\.secret_env: missing"),
    ({"sources": {"github": {"verifier": "github", "secret_env": "has space"}}}, r"secret_env: expected"),
    ({"sources": {"github": {"verifier": "github", "secret_env": "X", "secret": "inline"}}},
     r"webhooks\.sources\.github\.secret: unknown setting"),
    ({"sources": {"github": {"verifier": "github", "secret_env": "X", "header": "X-Sig"}}}, r"hmac verifier only"),
    ({"sources": {"approval": {"verifier": "hmac", "secret_env": "X"}}}, r"'approval' is used by the console"),
    ({"sources": {"timer": {"verifier": "hmac", "secret_env": "X"}}}, r"'timer' is used by the console"),
    ({"sources": {"Git Hub": {"verifier": "hmac", "secret_env": "X"}}}, r"a source name is lower-case"),
    ({"sources": {"h": {"verifier": "hmac", "secret_env": "X", "tolerance": -1}}}, r"sources\.h\.tolerance"),
    ({"sources": {"h": {"verifier": "hmac", "secret_env": "X", "id_header": "bad header"}}}, r"sources\.h\.id_header"),
])
def test_bad_webhook_settings_name_the_setting(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_webhooks(raw)


def test_the_readme_webhooks_example_is_a_valid_config(tmp_path: Path) -> None:
    from console.config import load_settings
    from console.edges.channels import build_channels
    from console.edges.config import parse_webhooks

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Webhooks and outbox channels", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    config = tmp_path / "config.toml"
    config.write_text(example, encoding="utf-8")
    settings = load_settings(config, env={})
    webhooks = parse_webhooks(settings.webhooks)
    assert list(webhooks.sources) == ["github"] and (webhooks.host, webhooks.port) == ("127.0.0.1", 8765)
    assert [channel.name for channel in build_channels(settings)] == ["console", "apprise"]
