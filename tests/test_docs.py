"""The README and ``docs/`` as a user reads them: the error table matches the code, links resolve, and every
example with its output shown runs as written and prints that output."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from numi_mw.core.errors import ERROR_CODES

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent


def blocks(page: Path, language: str) -> list[str]:
    """The fenced code blocks of ``page`` in ``language``."""
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text(), flags=re.MULTILINE | re.DOTALL)


def examples(block: str) -> list[tuple[str, list[str]]]:
    """``(command, expected output lines)`` for each command of a shell block: a command is a line (with its
    ``\\`` continuations) that is not a comment; the ``# `` lines after it are what it prints."""
    found: list[tuple[str, list[str]]] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            i += 1
            continue
        command = [line]
        while command[-1].endswith("\\"):
            i += 1
            command.append(lines[i])
        i += 1
        expected: list[str] = []
        while i < len(lines) and lines[i].startswith("# "):
            expected.append(lines[i][2:])
            i += 1
        found.append(("\n".join(command), expected))
    return found


SHELL_EXAMPLES = [
    pytest.param(command, expected, id=f"{page.name}:{n}")
    for page in PAGES
    for block in blocks(page, "bash")
    if any(expected for _, expected in examples(block))
    for n, (command, expected) in enumerate(examples(block))
]


def test_every_page_has_examples_that_run() -> None:
    assert len(SHELL_EXAMPLES) >= 6


@pytest.mark.parametrize(("command", "expected"), SHELL_EXAMPLES)
def test_shell_examples_print_what_the_docs_show(command: str, expected: list[str]) -> None:
    command = command.replace(".venv/bin/", f"{BIN}/")
    result = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    if expected:
        assert result.stdout.rstrip("\n").splitlines() == expected


def python_examples() -> list[tuple[str, list[str]]]:
    """Python blocks with output shown: ``# `` lines right after a line that prints."""
    found: list[tuple[str, list[str]]] = []
    for page in PAGES:
        for block in blocks(page, "python"):
            expected: list[str] = []
            shown = False  # the lines so far are a print and the "# " lines right after it
            for line in block.splitlines():
                if line.strip().startswith("# ") and shown:
                    expected.append(line.strip()[2:])
                else:
                    shown = "print(" in line
            if expected:
                found.append((block, expected))
    return found


@pytest.mark.parametrize(("code", "expected"), python_examples())
def test_python_examples_print_what_the_docs_show(code: str, expected: list[str]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<docs>", "exec"), {})
    printed = [line for line in out.getvalue().splitlines() if line]
    assert printed == expected


def test_the_error_table_is_the_code_table() -> None:
    rows = re.findall(r"^\| (.+?) \| (\d{3}) \| `(\w+)` \| .+ \|$", (ROOT / "docs/errors.md").read_text(), re.M)
    assert rows
    for situation, status, code in rows:
        assert code in ERROR_CODES, code
        assert ERROR_CODES[code][0] == int(status), situation
    assert {code for _, _, code in rows} == set(ERROR_CODES)


def test_no_other_page_repeats_the_error_table() -> None:
    for page in PAGES:
        if page.name != "errors.md":
            assert "| `error.code` |" not in page.read_text(), page


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of ``page``, a repeated one with GitHub's ``-1``, ``-2`` suffixes."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.M):
        base = anchor(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page: Path) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}"
        if fragment and linked.suffix == ".md":
            assert fragment in anchors(linked), f"{page.name}: {target}"


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150 or "## Contents" in lines
