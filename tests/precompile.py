"""The suite's Python is compiled once a run, not once a process (tests/conftest.py calls these at configure).

With PYTHONDONTWRITEBYTECODE set (as on the team's machines and so in their CI), no process writes bytecode:
every real process a test starts (a crash test's worker life, the CLI, an engine, an MCP server's checkout)
compiled the modules of console/ and tests/ it imports from source, 0.25-0.3 s of CPU each, and each xdist
worker rewrote the asserts of all ~230 test modules (12 s of CPU) that the other worker rewrote too. Nothing
here changes what runs: Python checks a .pyc against its source's mtime and size (and pytest its rewritten
ones the same way) and compiles again when they differ. The files go where Python itself would put them
(__pycache__, ignored by git)."""

from __future__ import annotations

import compileall
import sys
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("console", "tests", "bench")


def compile_packages() -> None:
    """Plain bytecode for everything a test's subprocess may import from this checkout (fresh files are
    skipped: compileall compares each .pyc with its source)."""
    for package in PACKAGES:
        compileall.compile_dir(ROOT / package, quiet=1, workers=2)


def rewritten_pyc(source: Path) -> Path:
    """Where pytest reads the assert-rewritten code of a test module from (its own naming)."""
    return rewrite.get_cache_dir(source) / (source.name[:-3] + rewrite.PYC_TAIL)


def rewrite_test_modules(config: pytest.Config, sources: list[Path], start: int) -> int:
    """Rewrite the asserts of the modules pytest will import, from sources[start] round to sources[start-1],
    skipping any whose rewritten .pyc is already current: two workers starting half-way apart each do about half
    and read the other's half. Returns how many this process rewrote. Uses pytest's own rewriter (so the code
    is what pytest would have built); a pytest without these internals only loses the saving."""
    state = config.stash[rewrite.assertstate_key]
    done = 0
    for source in sources[start:] + sources[:start]:
        pyc = rewritten_pyc(source)
        if rewrite._read_pyc(source, pyc) is not None:
            continue
        source_stat, code = rewrite._rewrite_test(source, config)
        pyc.parent.mkdir(exist_ok=True)
        rewrite._write_pyc(state, code, source_stat, pyc)
        done += 1
    return done


def modules_to_rewrite(config: pytest.Config) -> list[Path]:
    """The test modules and conftests of this checkout that this run will import (the paths it was given)."""
    patterns = [*config.getini("python_files"), "conftest.py"]
    found: set[Path] = set()
    for arg in config.args:
        given = Path(arg.split("::")[0]).resolve()
        if not given.is_relative_to(ROOT):
            continue
        if given.is_dir():
            found |= {path for pattern in patterns for path in given.rglob(pattern)}
        elif given.is_file():
            found.add(given)
        found |= {folder / "conftest.py" for folder in given.parents if folder.is_relative_to(ROOT)
                  and (folder / "conftest.py").is_file()}
    return sorted(path for path in found if "__pycache__" not in path.parts)


def compile_once(config: pytest.Config) -> None:
    """The controller (or a run without xdist) compiles the packages before any worker starts; each worker
    rewrites its share of the test modules before collecting them."""
    worker = getattr(config, "workerinput", None)
    if worker is None:
        compile_packages()
    if config.getoption("assertmode") != "rewrite" or not sys.dont_write_bytecode:
        return  # pytest caches its rewrites itself when it may write bytecode
    if worker is None and getattr(config.option, "dist", "no") != "no":
        return  # xdist's controller collects nothing: its workers share the rewriting
    sources = modules_to_rewrite(config)
    index, count = (0, 1) if worker is None else (int(worker["workerid"].removeprefix("gw")), worker["workercount"])
    try:
        rewrite_test_modules(config, sources, len(sources) * index // max(count, 1))
    except (AttributeError, TypeError, OSError):  # another pytest's internals, a read-only checkout: no saving
        return
