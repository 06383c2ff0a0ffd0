"""A real ``redis-server`` on a free loopback port for the replay store's tests (Debian's ``redis-server``
package), with no persistence (``--save '' --appendonly no``), stopped at the end."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from benchmarks.loopback import free_port, stop_process, wait_for_port


def redis_server_binary() -> str:
    """The ``redis-server`` binary; skips the test when there is none."""
    found = shutil.which("redis-server") or ("/usr/bin/redis-server" if shutil.which("/usr/bin/redis-server") else None)
    if found is None:
        pytest.skip("redis-server is not installed (Debian package redis-server): the Redis store is not tested")
    return found


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    """Run ``redis-server`` on 127.0.0.1 and a free port while the block runs; yields ``redis://127.0.0.1:PORT/0``."""
    binary = redis_server_binary()
    port = free_port()
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process, name="redis-server", seconds=20.0)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process(process)
