"""`agent-console telegram pair|unpair|chats`: pairing the owner's Telegram chat without editing files (issue 20).

Registered on the main group by console/cli.py; the helpers it shares with it are console/cli_common.py's. The
code is made here and only its hash is stored in the inbox; the running engine (the one holding the lease) checks
what the owner sends to the bot against it.
"""

from __future__ import annotations

import os
import socket

import click

from console.cli_common import CliState, UserError, _now, _print_json, _say, rejecting_bad_input
from console.core.chats import PAIR_CODE_SECONDS, code_hash, pair_code

SOURCE = "telegram"
GET_ME_SECONDS = 10  # the bot token's check with Telegram, before a code is made


@click.group()
def telegram() -> None:
    """Pair your Telegram chat with the agent, list or forget paired chats."""


@telegram.command("pair")
@click.pass_obj
def telegram_pair(state: CliState) -> None:
    """Print a one-time code (good for 10 minutes) to send to the bot as `/pair CODE`: the chat it comes from
    becomes yours (in a group, only you are trusted there). A new code replaces the last one. Only when the code can
    be received: a Telegram channel configured, its bot token accepted by Telegram, and an engine holding this
    inbox's lease to read what the bot is sent; otherwise one line says which is missing."""
    from console.edges.phone_config import NoTelegramChannel, telegram_bot  # loaded here: see `telegram webhook`
    from console.edges.telegram_webhook import bot_api_call

    try:
        api_base, token, _secret = telegram_bot(state.settings(), os.environ)
    except NoTelegramChannel:
        raise UserError('no Telegram channel to pair with: add a [[channels]] table with type = "telegram" and '
                        "token_env (README, Telegram), start the engine, then pair") from None
    try:
        bot_api_call(api_base, token, "getMe", {}, timeout=GET_ME_SECONDS)
    except ValueError as exc:
        raise UserError(f"Telegram did not accept the bot token ({exc}): put the token @BotFather gave you in the "
                        f"channel's token_env variable (or check its api_base and the network)") from None
    with state.store() as store, rejecting_bad_input():
        now = _now()
        lease = store.lease()
        if lease is None or not lease.is_live(now):
            raise UserError("no engine is running on this inbox to receive /pair: start `agent-console run` (or the "
                            "console) with the Telegram channel, then pair")
        code = pair_code()
        store.new_pair_code(SOURCE, code_hash(code), expires_at=now + PAIR_CODE_SECONDS)
    _say(f"Send this to your bot within {PAIR_CODE_SECONDS // 60} minutes ({receiver_in_words(lease.holder)}):")
    _say(f"/pair {code}")


def receiver_in_words(holder: str) -> str:
    """Which engine reads the bot's messages, from its lease holder id (host:pid:tag, runtime/engine.py)."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if not host or not pid.isdigit():
        return f"the engine holding the lease, {holder}, receives it"
    if host == socket.gethostname():
        return f"the engine on this machine, process {pid}, receives it"
    return f"the engine on another machine, {host}, receives it"


@telegram.command("unpair")
@click.argument("chat_id", required=False)
@click.pass_obj
def telegram_unpair(state: CliState, chat_id: str | None) -> None:
    """Forget the paired chat CHAT_ID (every paired chat without it); its messages no longer reach the agent."""
    with state.store() as store, rejecting_bad_input():
        forgotten = store.unpair_chat(SOURCE, chat_id)
    if chat_id is not None and not forgotten:
        raise UserError(f"chat {chat_id} is not paired")
    _say(f"unpaired {forgotten} chat{'s' if forgotten != 1 else ''}")


@telegram.command("chats")
@click.option("--json", "as_json", is_flag=True, help="Print the channel's state as JSON.")
@click.pass_obj
def telegram_chats(state: CliState, as_json: bool) -> None:
    """The paired chats, the chats refused, and how the channel is doing."""
    with state.reader() as store:
        info = store.chat_status(SOURCE)
    if as_json:
        _print_json(info)
        return
    for line in telegram_lines(info) or ["telegram   no chat paired (agent-console telegram pair)"]:
        _say(line)
    for chat in info["paired_chats"]:
        _say(f"  {chat['chat_id']}  {chat['kind']}{'  ' + chat['title'] if chat['title'] else ''}  "
             f"owner {chat['owner_id']}")


@telegram.command("webhook")
@click.option("--url", metavar="URL", help="The public https:// address of the receiver (ending in /telegram).")
@click.option("--delete", is_flag=True, help="Remove the webhook: the engine goes back to polling.")
@click.pass_obj
def telegram_webhook(state: CliState, url: str | None, delete: bool) -> None:
    """Have Telegram POST the bot's updates to the receiver (`webhook_secret_env` set on the channel, the
    receiver reachable at URL), or with --delete stop it. Updates are stored under the same keys either way."""
    # The phone channels' modules (with urllib's opener, http.client and the email package) load for this command
    # only: every start of the program (the console's among them) imports this module to register it.
    from console.edges.phone_config import telegram_bot
    from console.edges.telegram import UPDATE_KINDS
    from console.edges.telegram_webhook import PATH, bot_api_call

    if delete == (url is not None):
        raise UserError("give --url URL, or --delete")
    api_base, token, secret = telegram_bot(state.settings(), os.environ)
    try:
        if delete:
            bot_api_call(api_base, token, "deleteWebhook", {"drop_pending_updates": False})
            _say("webhook removed: remove webhook_secret_env from the channel and restart, and the engine polls")
            return
        assert url is not None
        if not url.startswith("https://") and not url.startswith("http://"):
            raise UserError(f"--url: expected an https:// address of the receiver, got {url!r}")
        if secret is None:
            raise UserError("set webhook_secret_env on the telegram channel first (the secret Telegram sends "
                            "with each update)")
        bot_api_call(api_base, token, "setWebhook", {"url": url, "secret_token": secret.reveal(),
                                                     "allowed_updates": UPDATE_KINDS})
    except ValueError as exc:
        raise UserError(str(exc)) from None
    _say(f"webhook set: Telegram now POSTs updates to {url} (the receiver takes them at {PATH})")


def telegram_lines(info: dict[str, object]) -> list[str]:
    """status's line for the channel (nothing when it was never used)."""
    paired = info.get("paired_chats") or []
    assert isinstance(paired, list)
    refused = info.get("refused_messages") or 0
    if info.get("state") == "off" and not paired and not refused:
        return []
    reason = f" ({info['reason']})" if info.get("reason") else ""
    return [f"telegram   {info.get('state')}{reason} · {len(paired)} paired chat{'s' if len(paired) != 1 else ''}"
            f" · {refused} message{'s' if refused != 1 else ''} refused from chats not paired"]
