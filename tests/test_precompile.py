"""The suite's own set-up: its once-a-run compilation (tests/precompile.py) hands pytest exactly the code it would
build itself, and what collection loaded is left out of the garbage collector's walks (tests/conftest.py)."""

from __future__ import annotations

import gc
import os
import types
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

from tests.conftest import YOUNG_COLLECTION
from tests.precompile import modules_to_rewrite, rewrite_test_modules, rewritten_pyc


def test_a_rewritten_module_is_what_pytest_builds_and_is_rebuilt_when_its_source_changes(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    source = tmp_path / "test_sample.py"
    source.write_text("def test_it():\n    x = 1\n    assert x == 2, 'the message'\n")
    assert rewrite_test_modules(pytestconfig, [source], 0) == 1
    cached = rewrite._read_pyc(source, rewritten_pyc(source))
    assert cached is not None
    assert cached == rewrite._rewrite_test(source, pytestconfig)[1]  # code objects compare by content
    (function,) = [const for const in cached.co_consts if isinstance(const, types.CodeType)]
    assert any(name.startswith("@py_assert") for name in function.co_varnames)  # the asserts were rewritten
    assert rewrite_test_modules(pytestconfig, [source], 0) == 0  # current: read, not rebuilt

    source.write_text("def test_it():\n    assert 3 == 3\n")
    os.utime(source, (1, 1))  # another mtime and size: the old .pyc no longer matches
    assert rewrite_test_modules(pytestconfig, [source], 0) == 1
    again = rewrite._read_pyc(source, rewritten_pyc(source))
    assert again is not None and again == rewrite._rewrite_test(source, pytestconfig)[1]


def test_two_workers_starting_half_way_apart_each_rewrite_about_half(
    tmp_path: Path, pytestconfig: pytest.Config
) -> None:
    sources = []
    for n in range(6):
        sources.append(tmp_path / f"test_m{n}.py")
        sources[-1].write_text(f"def test_{n}():\n    assert {n} == {n}\n")
    first = rewrite_test_modules(pytestconfig, sources[:4], 0)  # the first worker got through four
    second = rewrite_test_modules(pytestconfig, sources, 3)  # the second starts at the fourth, wraps round
    assert (first, second) == (4, 2)
    assert all(rewrite._read_pyc(source, rewritten_pyc(source)) is not None for source in sources)


def test_the_run_rewrites_the_test_modules_of_the_paths_it_was_given_and_their_conftests(
    pytestconfig: pytest.Config
) -> None:
    here = Path(__file__).resolve()
    found = modules_to_rewrite(pytestconfig)
    assert here in found  # this module is in every run that runs this test
    assert here.with_name("conftest.py") in found
    assert all(path.name.startswith("test_") or path.name == "conftest.py" for path in found)


def test_what_collection_loaded_is_frozen_and_young_collections_are_rarer() -> None:
    assert gc.isenabled()
    assert gc.get_freeze_count() > 10_000  # the test modules and libraries collection imported
    assert gc.get_threshold()[0] == YOUNG_COLLECTION
    gc.disable()  # none of the cycles below is freed before the count
    try:
        made: list[list[object]] = [[] for _ in range(100)]
        for cell in made:
            cell.append(cell)  # cycles: garbage only the collector can free
        del made, cell
    finally:
        gc.enable()
    assert gc.collect() >= 100  # what the tests make is still collected
