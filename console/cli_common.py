"""What every command module shares (cli.py and the chat sources' cli_telegram.py): the values the command line
takes, refused in the product's own words; the one-line user error and the group that turns every mistake into
one; the group's state (its settings, the inbox opened for a command through open_inbox); and the output helpers
that escape outside text. Apart from cli.py so that a command module registered on the group imports these and
not the group's own module (no import circle)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import click

from console.clock import WallClock
from console.config import ConfigError, Settings, ensure_default_db_folder, load_settings, open_inbox
from console.core import MAX_PAYLOAD_DEPTH, Store, StoreError
from console.core.errors import reporting_damage
from console.core.store import inbox_location
from console.textsafe import json_terminal_safe, terminal_safe

PROG = "agent-console"
USER_ERROR = 2


# --- values on the command line, refused in the product's words (not Click's) --------------------

class WholeNumber(click.IntRange):
    """A whole number in [minimum, maximum]."""

    def __init__(self, minimum: int, maximum: int) -> None:
        super().__init__(min=minimum, max=maximum)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"expected a whole number from {self.min:,} to {self.max:,}, got {str(value)!r}", param, ctx)


class OneOf(click.Choice[str]):
    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"expected one of {', '.join(map(str, self.choices))}, got {str(value)!r}", param, ctx)


class Dollars(click.ParamType[float]):
    name = "usd"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return float(value)
        except (TypeError, ValueError):
            self.fail(f"expected a number of US dollars, got {str(value)!r}", param, ctx)


class FilePath(click.Path):
    """A file's path (it need not exist yet); a folder is refused."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"expected a file, got the folder {str(value)!r}", param, ctx)


class InboxTarget(FilePath):
    """An inbox: a file's path, or a PostgreSQL URL (kept as text: a path would fold its //)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            target = inbox_location(str(value))
        except StoreError as exc:
            self.fail(str(exc), param, ctx)
        if isinstance(target, Path):
            return super().convert(value, param, ctx)
        return target


# An id or a count the inbox can hold (SQLite integers are 64-bit): a larger one is a usage error, not an overflow.
SQLITE_COUNT = WholeNumber(1, 2**63 - 1)


def _param_words(param: click.Parameter | None) -> str:
    """An argument by its metavar (TIMER_ID), an option by its long name (--days)."""
    if param is None:
        return "a value"
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return param.human_readable_name


def _did_you_mean(possibilities: Any) -> str:
    found = sorted(possibilities or ())
    return f" (did you mean {' or '.join(found)}?)" if found else ""


def usage_in_words(exc: click.UsageError) -> str:
    """A usage mistake as one line in the product's own words."""
    if isinstance(exc, click.NoSuchOption):
        return f"there is no option {exc.option_name}{_did_you_mean(exc.possibilities)}"
    if isinstance(exc, click.exceptions.NoSuchCommand):
        return f"there is no command {exc.command_name!r}{_did_you_mean(exc.possibilities)}"
    if isinstance(exc, click.MissingParameter):
        return f"{_param_words(exc.param)} is missing"
    if isinstance(exc, click.BadParameter):
        return f"bad value for {_param_words(exc.param)}: {exc.message}"
    if isinstance(exc, click.BadOptionUsage) and "requires an argument" in exc.message:
        return f"{exc.option_name} needs a value"
    extra = re.fullmatch(r"Got unexpected extra arguments? \((.*)\)", exc.message.strip())
    if extra:
        return f"unexpected extra argument{'s' if ' ' in extra[1] else ''}: {extra[1]}"
    message = exc.message.strip().rstrip(".")
    return message[:1].lower() + message[1:]


class UserError(click.ClickException):
    """A mistake the user can fix: one line on stderr, exit code 2, never a traceback."""

    exit_code = USER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))

    def show(self, file: Any = None) -> None:
        click.echo(f"{PROG}: error: {terminal_safe(self.format_message())}", err=True)


def _command_path(ctx: click.Context) -> str:
    """`agent-console timers add`, however the program was started (python -m console, a test runner)."""
    names: list[str] = []
    while ctx.parent is not None:
        names.insert(0, ctx.info_name or "")
        ctx = ctx.parent
    return " ".join([PROG, *names])


@contextmanager
def _one_line_usage_errors() -> Iterator[None]:
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise  # `agent-console timers` alone shows the help, as click intends
    except click.UsageError as exc:
        hint = f" (see '{_command_path(exc.ctx)} --help')" if exc.ctx is not None else ""
        raise UserError(usage_in_words(exc) + hint) from None


@contextmanager
def rejecting_bad_input() -> Iterator[None]:
    """The core says what is wrong with a value it was given (ValueError); that is the user's input
    here, so it becomes a user error. Kept narrow: a ValueError elsewhere is a bug and keeps its traceback."""
    try:
        yield
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _refuse_non_utf8(args: list[str]) -> None:
    """Bytes that are not UTF-8 on the command line arrive as lone surrogates, which SQLite cannot store:
    say so once, up front, instead of failing wherever the argument is first used."""
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            raise UserError(f"the command-line argument {arg!r} is not valid UTF-8 text") from None


class ConsoleGroup(click.Group):
    """A click group whose errors are all one line: usage errors, bad settings and unusable inbox files."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        if parent is None:
            _refuse_non_utf8(args)
        with _one_line_usage_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _one_line_usage_errors():
            try:
                return super().invoke(ctx)
            except (ConfigError, StoreError) as exc:
                raise UserError(str(exc)) from None


@dataclasses.dataclass
class CliState:
    """The group's options; settings are loaded on first use so that `--help` works with a broken config."""

    config_path: Path | None
    db: Path | str | None
    _settings: Settings | None = None

    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings(self.config_path, overrides={"db": self.db})
        return self._settings

    @contextmanager
    def store(self) -> Iterator[Store]:
        """The inbox for a command that writes: created (and migrated) if need be."""
        settings = self.settings()
        ensure_default_db_folder(settings)
        with self._opened(open_inbox(settings)) as store:
            yield store

    @contextmanager
    def reader(self) -> Iterator[Store]:
        """The inbox for a command that only reads: opened read-only, so it takes no write lock, waits
        for no writer and changes nothing in the file (no migration, no new file)."""
        settings = self.settings()
        with self._opened(open_inbox(settings, read_only=True)) as store:
            yield store

    @staticmethod
    @contextmanager
    def _opened(store: Store) -> Iterator[Store]:
        # No command checks the whole file when it opens it (that read costs seconds on a large inbox
        # and holds the WAL back meanwhile): the engine does at start, and `check` on demand. Damage a
        # command meets on its way is one line that says what to do.
        try:
            with reporting_damage(store.path):
                yield store
        finally:
            store.close()

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.settings().timezone)


def _now() -> int:
    return WallClock().now()


def _parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UserError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:  # json's decoder recurses: far past what the inbox takes anyway
        raise UserError(f"{what} is nested deeper than {MAX_PAYLOAD_DEPTH} levels") from None


def _print_json(value: Any) -> None:
    click.echo(json_terminal_safe(json.dumps(value, indent=2, ensure_ascii=False, default=str)))


def _say(line: str) -> None:
    """One line of human output that may hold outside text (ids, errors, payload strings): escaped."""
    click.echo(terminal_safe(line))


def _short_time(when: int, now: int, zone: ZoneInfo) -> str:
    """13:38 today, else 2026-11-30 13:38."""
    moment = datetime.fromtimestamp(when, zone)
    same_day = moment.date() == datetime.fromtimestamp(now, zone).date()
    return moment.strftime("%H:%M" if same_day else "%Y-%m-%d %H:%M")


def _clock_time(when: int, zone: ZoneInfo) -> str:
    return datetime.fromtimestamp(when, zone).isoformat(sep=" ", timespec="seconds")
