"""The optional mypyc build of the core (``.ci/build-mypyc``): which modules it compiles, and that a run meant for
the compiled core gets it.

Set ``NUMI_MW_EXPECT_COMPILED=1`` with the compiled core first on the path (``docs/testing.md``) and
``test_compiled_core_is_imported`` checks that every compiled module came from its C extension, so such a run cannot
test the pure core by mistake.
"""

from __future__ import annotations

import ast
import importlib
import os
from pathlib import Path

import pytest

from benchmarks.compiled import LEFT_OUT, REPO, compiled_modules


def _module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def test_compiled_modules_are_the_core_less_the_left_out() -> None:
    modules = compiled_modules()
    assert modules == [
        "numi_mw/core/__init__.py",
        "numi_mw/core/adapters/__init__.py",
        "numi_mw/core/adapters/anthropic_messages.py",
        "numi_mw/core/adapters/base.py",
        "numi_mw/core/adapters/openai_responses.py",
        "numi_mw/core/budget.py",
        "numi_mw/core/chunks.py",
        "numi_mw/core/codec.py",
        "numi_mw/core/completion.py",
        "numi_mw/core/details.py",
        "numi_mw/core/errors.py",
        "numi_mw/core/fields.py",
        "numi_mw/core/history.py",
        "numi_mw/core/response.py",
        "numi_mw/core/shapes.py",
        "numi_mw/core/spliced.py",
        "numi_mw/core/splitter.py",
        "numi_mw/core/sse.py",
    ]
    assert len(modules) + len(LEFT_OUT) == len(list((REPO / "numi_mw" / "core").rglob("*.py")))


def test_no_compiled_module_defines_what_mypyc_changes() -> None:
    """mypyc erases a msgspec Struct's annotations and drops the keywords of a ``class`` line: a compiled module
    defines neither (such a module belongs in ``LEFT_OUT``)."""
    for name in compiled_modules():
        tree = ast.parse((REPO / name).read_text(), name)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                assert not node.keywords, f"{name}: class {node.name}"
                assert not any("Struct" in ast.unparse(base) for base in node.bases), f"{name}: class {node.name}"


def test_compiled_core_is_imported() -> None:
    if os.environ.get("NUMI_MW_EXPECT_COMPILED") != "1":
        pytest.skip("NUMI_MW_EXPECT_COMPILED=1 is not set: this run tests the pure Python core")
    for name in compiled_modules():
        module = importlib.import_module(_module_name(name))
        assert module.__file__ is not None and module.__file__.endswith(".so"), module.__file__
        assert not Path(module.__file__).is_relative_to(REPO), module.__file__
    for name in LEFT_OUT:
        module = importlib.import_module(_module_name(name))
        assert module.__file__ is not None and module.__file__.endswith(".py"), module.__file__
