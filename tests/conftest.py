"""Shared fixtures: the ``../shared`` folder (recorded traffic and handed cases) beside the repository."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from numi_mw.proxy.ops import LEAN_LOG_SWITCHES
from numi_mw.upstream import DEFAULT_UPSTREAM_TRANSPORT, UPSTREAM_TRANSPORTS

SHARED = Path(__file__).resolve().parents[2] / "shared"
SHARED_ABSENT = f"{SHARED} is absent: recorded fixtures and handed cases live outside the repository"
"""The reason every test that reads ``shared/`` gives when it skips."""


def recordings(folder: Path, *suffixes: str) -> list[Any]:
    """The names of the recordings in ``folder`` (under ``shared/``) that end with one of ``suffixes``, to
    parametrize a test over; one skipped case when the folder is absent, so that the test skips on it even if
    ``shared/`` itself appears later, or without this folder."""
    if not folder.is_dir():
        return [pytest.param("", marks=pytest.mark.skip(reason=f"{folder} is absent ({SHARED_ABSENT})"))]
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(suffixes))


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The ``shared/`` folder beside the repository; skips the test when it is absent (a user's clone)."""
    if not SHARED.is_dir():
        pytest.skip(SHARED_ABSENT)
    return SHARED


SIDECAR_TRANSPORT = [DEFAULT_UPSTREAM_TRANSPORT]
"""The upstream transport ``e2e_support.sidecar`` starts ``numi-mw serve`` with: the ``upstream_transport``
fixture's, else the default."""


@pytest.fixture(scope="module", params=UPSTREAM_TRANSPORTS)
def upstream_transport(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a module's tests once per upstream transport: every sidecar ``e2e_support.sidecar`` starts meanwhile
    uses it (a module-scoped sidecar fixture takes this fixture, so that it is started once per transport)."""
    name: str = request.param
    SIDECAR_TRANSPORT[0] = name
    try:
        yield name
    finally:
        SIDECAR_TRANSPORT[0] = DEFAULT_UPSTREAM_TRANSPORT


def keep_logging_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the ``logging`` switches ``ops.lean_log_records`` sets (``LEAN_LOG_SWITCHES``) back after the test, so
    that a test that runs it, or ``numi-mw serve`` in this process, leaves the others' logging as it was."""
    for name in LEAN_LOG_SWITCHES:
        if hasattr(logging, name):  # logAsyncioTasks: Python 3.12 and later
            monkeypatch.setattr(logging, name, getattr(logging, name))


def load_case(shared: Path, case_id: str) -> dict[str, Any]:
    """One handed case of ``cases/public-bugs.json`` by id (e.g. ``PB-15``)."""
    cases: list[dict[str, Any]] = json.loads((shared / "cases" / "public-bugs.json").read_text())
    for case in cases:
        if case["id"] == case_id:
            return case
    raise KeyError(case_id)


def pytest_report_header() -> str:
    """Which build of ``numi_mw.core`` this run tests: the pure Python modules or the mypyc-compiled ones."""
    import numi_mw.core
    import numi_mw.core.history

    return f"numi_mw core: {numi_mw.core.build()}, {Path(numi_mw.core.history.__file__ or '?').parent}"
