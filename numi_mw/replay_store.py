"""Replay stores: where the sidecar and the middleware keep the opaque reasoning state of the turns they relay, to
put it back on a later request whose history lost it (``numi_mw.core.replay`` says what is kept and how it is
keyed; ``docs/replay-store.md`` has the whole picture).

Two backends behind one interface (``Backend``: ``get_many(scope, keys)``, ``put(scope, key, value)``):

- ``sqlite:///PATH``: an embedded file, through the standard library's ``sqlite3`` run off the event loop
  (``anyio.to_thread``); created ``0600``; expired rows pruned, and the oldest rows past
  ``SQLITE_MAX_TOTAL_BYTES``.
- ``redis://HOST:PORT/DB`` (``rediss://`` for TLS): the ``redis`` client's asyncio API, each value with its time
  to live (``SET … EX``), so that many replicas share one store.

``ReplayStore`` wraps a backend with what holds for both: the size bound of a value, optional encryption
(AES-GCM from ``cryptography``, the key from an environment variable, bound to the value's scope and turn key),
and the failure rule: a store that fails never fails a request (a lookup finds nothing, a value is not kept), and
a warning is logged at most once per ``WARN_INTERVAL`` seconds, naming the backend, the operation and the
exception's type only: never a value, a key, a scope or a credential.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import os
import sqlite3
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

import anyio.to_thread

from numi_mw.core.structs import check_limits

log = logging.getLogger("numi_mw.replay")

DEFAULT_TTL: Final = 24 * 60 * 60
"""How long a stored value lives, in seconds (``--replay-ttl``): 24 hours, long enough for a conversation that
pauses over a day, short for data spec 000 calls sensitive ("Stored traces may contain sensitive content")."""

DEFAULT_MAX_VALUE_BYTES: Final = 4 * 1024 * 1024
"""The largest value kept, in bytes of JSON before encryption (``--replay-max-bytes``): 4 MiB. Anthropic's
signatures are a few KiB and encrypted reasoning items tens of KiB; a turn over the bound is relayed but not
kept."""

SQLITE_MAX_TOTAL_BYTES: Final = 1024 * 1024 * 1024
"""The most value bytes an SQLite store keeps (1 GiB): past it, the rows that expire first go at the next prune."""

PRUNE_INTERVAL: Final = 60.0
"""Seconds between two prunes of an SQLite store (expired rows, then the total bound), made by a write."""

WARN_INTERVAL: Final = 60.0
"""Seconds between two warnings about a failing store: one per minute, not one per request."""

PAUSE_AFTER_FAILURE: Final = 10.0
"""Seconds a store is left alone after it failed: lookups find nothing and nothing is kept, at once, so that a
store that hangs (each operation waiting its ``STORE_TIMEOUT``) costs one request that wait, not every request."""

STORE_TIMEOUT: Final = 2.0
"""Seconds a store operation may take: Redis' connect and socket timeouts, SQLite's busy timeout. A store that
does not answer in time counts as failed; the request goes on without it."""

RESTORED: Final = b"x-numi-mw-restored"
"""The response header that says how many assistant turns got their opaque state back (``restored_header``)."""

_KEY_SIZES = (16, 24, 32)


def _need(module: str) -> None:
    """Import ``module`` now.

    Raises:
        ValueError: it is not installed; the message names the extra that installs it (``numi_mw[replay]``).
    """
    try:
        __import__(module)
    except ImportError:
        raise ValueError(f"{module} is not installed: pip install 'numi_mw[replay]'") from None


def restored_header(count: int) -> list[tuple[bytes, bytes]]:
    """The ``x-numi-mw-restored: N`` response header when ``count`` (turns restored) is above 0, else none."""
    return [(RESTORED, str(count).encode())] if count > 0 else []


class Backend(Protocol):
    """Where values are kept. Methods raise whatever the backend raises; ``ReplayStore`` turns that into the
    failure rule."""

    name: str
    """``sqlite`` or ``redis``: what the failure warning names."""

    async def get_many(self, scope: str, keys: Sequence[str]) -> dict[str, bytes]:
        """The live values of ``keys`` in ``scope`` (hex digests), by key; absent and expired keys are left out."""

    async def put(self, scope: str, key: str, value: bytes) -> None:
        """Keep ``value`` for ``key`` in ``scope`` for the backend's time to live, replacing an older one."""

    async def aclose(self) -> None:
        """Release connections."""


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS replay (scope TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,"
    " expires REAL NOT NULL, PRIMARY KEY (scope, key)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS replay_expires ON replay (expires)",
)

_TRIM = (
    "DELETE FROM replay WHERE (scope, key) IN (SELECT scope, key FROM (SELECT scope, key,"
    " SUM(length(value)) OVER (ORDER BY expires DESC, scope, key) AS kept FROM replay) WHERE kept > ?)"
)
"""Remove the rows past the total bound, the ones that expire first (SQLite window functions, 3.25+)."""


class SQLiteBackend:
    """An SQLite file, one short connection per operation in a worker thread (``anyio.to_thread``).

    Args:
        path: the database file; created ``0600`` when absent, narrowed to ``0600`` when present.
        ttl: seconds a value lives.
        max_total_bytes: the most value bytes kept (``SQLITE_MAX_TOTAL_BYTES``).
        clock: seconds since the epoch (tests pass their own).

    Raises:
        ValueError: the file cannot be created or opened as an SQLite database (at start-up).
    """

    name = "sqlite"

    def __init__(
        self,
        path: str,
        ttl: float = DEFAULT_TTL,
        *,
        max_total_bytes: int = SQLITE_MAX_TOTAL_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.ttl = ttl
        self.max_total_bytes = max_total_bytes
        self.clock = clock
        self._pruned = 0.0
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.fchmod(fd, 0o600)
            finally:
                os.close(fd)
            with contextlib.closing(self._connect()) as db, db:
                db.execute("PRAGMA journal_mode=WAL")  # readers go on while one writes
                for statement in _SCHEMA:
                    db.execute(statement)
        except (OSError, sqlite3.Error) as exc:
            raise ValueError(f"the replay store {path!r} cannot be opened: {exc}") from None

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=STORE_TIMEOUT, isolation_level=None)

    def _get_many(self, scope: str, keys: Sequence[str]) -> dict[str, bytes]:
        marks = ",".join("?" * len(keys))
        with contextlib.closing(self._connect()) as db:
            rows = db.execute(
                f"SELECT key, value FROM replay WHERE scope = ? AND key IN ({marks}) AND expires > ?",
                (scope, *keys, self.clock()),
            ).fetchall()
        return {key: bytes(value) for key, value in rows}

    def _put(self, scope: str, key: str, value: bytes) -> None:
        now = self.clock()
        with contextlib.closing(self._connect()) as db, db:
            db.execute(
                "INSERT OR REPLACE INTO replay (scope, key, value, expires) VALUES (?, ?, ?, ?)",
                (scope, key, value, now + self.ttl),
            )
            if now - self._pruned >= PRUNE_INTERVAL or now < self._pruned:
                self._pruned = now
                db.execute("DELETE FROM replay WHERE expires <= ?", (now,))
                db.execute(_TRIM, (self.max_total_bytes,))

    async def get_many(self, scope: str, keys: Sequence[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        return await anyio.to_thread.run_sync(self._get_many, scope, list(keys))

    async def put(self, scope: str, key: str, value: bytes) -> None:
        await anyio.to_thread.run_sync(self._put, scope, key, value)

    async def aclose(self) -> None:
        """Nothing to release: every operation closes its connection."""


class RedisBackend:
    """A Redis server through ``redis.asyncio``: ``MGET`` to look up, ``SET … EX ttl`` to keep; keys are
    ``numi-mw:replay:{scope}:{turn key}``. No retries (a failure counts at once), ``STORE_TIMEOUT`` to connect and
    per call. A client is made per event loop (the asyncio client's connections belong to the loop that opened
    them).

    Args:
        url: ``redis://[:PASSWORD@]HOST[:PORT][/DB]`` or ``rediss://…`` (checked by ``open_replay_store``).
        ttl: seconds a value lives (whole seconds, at least 1).
    """

    name = "redis"

    def __init__(self, url: str, ttl: float = DEFAULT_TTL) -> None:
        _need("redis.asyncio")  # an install without the package fails at start-up, not per request
        self.url = url
        self.ttl = max(1, round(ttl))
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self._client_now: Any = None

    def _client(self) -> Any:
        import redis.asyncio
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop() is not loop:  # an earlier loop's client is dropped with its loop
            self._client_now = redis.asyncio.Redis.from_url(
                self.url,
                socket_timeout=STORE_TIMEOUT,
                socket_connect_timeout=STORE_TIMEOUT,
                retry=Retry(NoBackoff(), 0),
            )
            self._loop = weakref.ref(loop)
        return self._client_now

    @staticmethod
    def _name(scope: str, key: str) -> str:
        return f"numi-mw:replay:{scope}:{key}"

    async def get_many(self, scope: str, keys: Sequence[str]) -> dict[str, bytes]:
        if not keys:
            return {}
        values = await self._client().mget([self._name(scope, key) for key in keys])
        return {key: bytes(value) for key, value in zip(keys, values, strict=True) if value is not None}

    async def put(self, scope: str, key: str, value: bytes) -> None:
        await self._client().set(self._name(scope, key), value, ex=self.ttl)

    async def aclose(self) -> None:
        client, self._client_now, self._loop = self._client_now, None, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()


class ReplayStore:
    """A backend with the size bound, optional encryption and the failure rule (this module's docstring).

    Args:
        backend: where values are kept (``SQLiteBackend``, ``RedisBackend``, or one of your own).
        max_value_bytes: the largest value kept, in bytes before encryption (``DEFAULT_MAX_VALUE_BYTES``).
        key: an AES key (16, 24 or 32 bytes) to encrypt values with AES-GCM, or ``None`` to keep them as they are.
        clock: monotonic seconds, for the warning interval (tests pass their own).

    Raises:
        ValueError: ``max_value_bytes`` is not a positive whole number; ``key`` is not 16, 24 or 32 bytes.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        key: bytes | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_limits(replay_max_bytes=max_value_bytes)
        self.backend = backend
        self.max_value_bytes = max_value_bytes
        self._aead: Any = None
        if key is not None:
            _need("cryptography")
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            if not isinstance(key, bytes) or len(key) not in _KEY_SIZES:
                raise ValueError("the replay store key must be 16, 24 or 32 bytes")
            self._aead = AESGCM(key)
        self.clock = clock
        self._warned: float | None = None
        self._suppressed = 0
        self._paused_until = float("-inf")

    def _paused(self) -> bool:
        """Whether the store failed less than ``PAUSE_AFTER_FAILURE`` seconds ago (it is then not asked)."""
        return self.clock() < self._paused_until

    def _failed(self, operation: str, exc: BaseException, *, pause: bool = True) -> None:
        now = self.clock()
        if pause:  # the store itself failed (a value that does not decrypt is no failure of the store)
            self._paused_until = now + PAUSE_AFTER_FAILURE
        if self._warned is not None and now - self._warned < WARN_INTERVAL:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more failures since the last warning)" if self._suppressed else ""
        log.warning(
            "replay store %s: %s failed (%s)%s; turns go as the client sent them",
            self.backend.name,
            operation,
            type(exc).__name__,
            more,
        )
        self._warned, self._suppressed = now, 0

    @staticmethod
    def _bound(scope: str, key: str) -> bytes:
        return f"{scope}:{key}".encode()

    async def lookup(self, scope: str, keys: Sequence[str]) -> dict[str, bytes]:
        """The stored values of ``keys`` in ``scope``, by key (decrypted); never raises: on a failing store, or a
        value that does not decrypt (another key), that value is missing and the failure is warned. For
        ``PAUSE_AFTER_FAILURE`` seconds after a failure the store is not asked: nothing is found."""
        if not keys or self._paused():
            return {}
        try:
            found = await self.backend.get_many(scope, keys)
        except Exception as exc:
            self._failed("lookup", exc)
            return {}
        if self._aead is None:
            return found
        from cryptography.exceptions import InvalidTag

        out: dict[str, bytes] = {}
        for key, value in found.items():
            try:
                out[key] = self._aead.decrypt(value[:12], value[12:], self._bound(scope, key))
            except (InvalidTag, ValueError) as exc:
                self._failed("decrypt", exc, pause=False)
        return out

    async def remember(self, scope: str, key: str, value: bytes) -> bool:
        """Keep ``value`` for ``key`` in ``scope`` (encrypted when a key is set); ``False`` when it is over
        ``max_value_bytes``, the store failed (warned), or it failed less than ``PAUSE_AFTER_FAILURE`` seconds ago
        (not asked). Never raises."""
        if len(value) > self.max_value_bytes or self._paused():
            return False
        if self._aead is not None:
            nonce = os.urandom(12)
            value = nonce + self._aead.encrypt(nonce, value, self._bound(scope, key))
        try:
            await self.backend.put(scope, key, value)
        except Exception as exc:
            self._failed("store", exc)
            return False
        return True

    async def keep(self, scope: str, states: Sequence[tuple[str, bytes]]) -> None:
        """``remember`` each ``(key, value)`` of ``states`` in ``scope``, in order (``replay.answer_states``,
        ``replay.StreamStates.states``); never raises."""
        for key, value in states:
            await self.remember(scope, key, value)

    async def aclose(self) -> None:
        """Release the backend's connections (failures ignored)."""
        with contextlib.suppress(Exception):
            await self.backend.aclose()


def _redis_url(url: str) -> None:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ValueError("the replay store's Redis URL has a port that is not a number from 0 to 65535") from None
    if not parts.hostname:
        raise ValueError("the replay store's Redis URL needs a host: redis://HOST:PORT/DB")
    database = parts.path.strip("/")
    if database and not database.isdigit():
        raise ValueError("the replay store's Redis database must be a number: redis://HOST:PORT/DB")
    del port


def encryption_key(env: str) -> bytes:
    """The AES key in environment variable ``env``: URL-safe or standard base64 of 16, 24 or 32 bytes (make one
    with ``python -c "import os, base64; print(base64.urlsafe_b64encode(os.urandom(32)).decode())"``).

    Raises:
        ValueError: the variable is unset or empty, or its value is not such a key (the value is never shown).
    """
    text = os.environ.get(env, "").strip()
    if not text:
        raise ValueError(f"the replay store key variable {env} is not set")
    try:
        key = base64.b64decode(text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"the replay store key in {env} is not base64") from None
    if len(key) not in _KEY_SIZES:
        raise ValueError(f"the replay store key in {env} must be 16, 24 or 32 bytes, base64-encoded")
    return key


def open_replay_store(
    url: str,
    *,
    ttl: float = DEFAULT_TTL,
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    key_env: str | None = None,
) -> ReplayStore:
    """The replay store a URL names, checked at start-up.

    Args:
        url: ``sqlite:///PATH`` (``PATH`` as written: ``sqlite:///replay.db`` is relative to the working
            directory, ``sqlite:////var/lib/numi-mw/replay.db`` absolute), or ``redis://HOST:PORT/DB``
            (``rediss://`` for TLS; a password as ``redis://:PASSWORD@HOST:PORT/DB``).
        ttl: seconds a value lives (``DEFAULT_TTL``); Redis keeps whole seconds.
        max_value_bytes: the largest value kept, in bytes (``DEFAULT_MAX_VALUE_BYTES``).
        key_env: the name of an environment variable holding an AES key (``encryption_key``): values are then
            encrypted at rest; ``None`` keeps them as they are.

    Raises:
        ValueError: the URL is not one of those forms (SQLite's ``:memory:`` among them: it would not outlive a
            request), the SQLite file cannot be opened, ``ttl`` is not a positive number of seconds,
            ``max_value_bytes`` not a positive whole number, or the key variable is unset or not a key. The message
            never quotes a Redis password or the key.
    """
    if not isinstance(url, str):
        raise ValueError(f"the replay store must be a sqlite:/// or redis:// URL, not {url!r}")
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not ttl > 0 or ttl == float("inf"):
        raise ValueError(f"replay_ttl must be a positive number of seconds, not {ttl!r}")
    if key_env is not None and (not isinstance(key_env, str) or not key_env):
        raise ValueError(f"replay_key_env must name an environment variable, not {key_env!r}")
    key = encryption_key(key_env) if key_env is not None else None
    backend: Backend
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if not path or path == ":memory:":
            raise ValueError("the replay store needs a file: sqlite:///PATH")
        backend = SQLiteBackend(path, ttl)
    elif url.startswith(("redis://", "rediss://")):
        _redis_url(url)
        backend = RedisBackend(url, ttl)
    else:
        scheme = url.partition(":")[0] if ":" in url else url[:20]
        raise ValueError(f"the replay store must be a sqlite:///PATH or redis://HOST:PORT/DB URL, not {scheme!r}")
    return ReplayStore(backend, max_value_bytes=max_value_bytes, key=key)


def replay_store_option(
    value: object,
    *,
    ttl: object = DEFAULT_TTL,
    max_value_bytes: object = DEFAULT_MAX_VALUE_BYTES,
    key_env: object = None,
) -> ReplayStore | None:
    """The shells' ``replay_store`` option: ``None`` (off, the default), a URL (``open_replay_store`` with the other
    options), or a ``ReplayStore`` made by hand.

    Raises:
        ValueError: what ``open_replay_store`` refuses; the other options given without a URL (off, or a
            ``ReplayStore``, which carries its own); ``value`` of another type.
    """
    options = (ttl, max_value_bytes, key_env) != (DEFAULT_TTL, DEFAULT_MAX_VALUE_BYTES, None)
    if value is None or isinstance(value, ReplayStore):
        if options:
            raise ValueError("replay_ttl, replay_max_bytes and replay_key_env go with a replay_store URL")
        return value
    if not isinstance(value, str):
        raise ValueError(f"replay_store must be None, a sqlite:/// or redis:// URL, or a ReplayStore, not {value!r}")
    return open_replay_store(value, ttl=ttl, max_value_bytes=max_value_bytes, key_env=key_env)  # type: ignore[arg-type]
