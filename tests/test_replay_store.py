"""The replay stores (``numi_mw.replay_store``): one suite run against SQLite and a real ``redis-server`` (put and
get, time to live, the size bound, scope isolation, encryption at rest, a store that is down), then what is
particular to each (the SQLite file's mode and pruning, the URL and key checks)."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import sqlite3
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from numi_mw.core.replay import answer_states, missing, missing_in_body, restore
from numi_mw.replay_store import (
    DEFAULT_MAX_VALUE_BYTES,
    DEFAULT_TTL,
    RedisBackend,
    ReplayStore,
    SQLiteBackend,
    encryption_key,
    open_replay_store,
    restored_header,
)
from tests.redis_support import redis_server

TTL = 3600
SIGNATURE = "EugCCkgIDRABGAIqQPO/3ufZc1gKugjv03ufL77WNiAsz39I93VSLf5dQy4mI0Lz23HR"
VALUE = (
    '[{"type":"reasoning.text","text":"t","signature":"' + SIGNATURE + '","format":"anthropic-claude-v1"}]'
).encode()
KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()


@dataclass
class Clock:
    now: float = 1_790_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Kind:
    """One backend under test, with what the suite needs to look behind it."""

    name: str
    backend: Any
    clock: Clock = field(default_factory=Clock)
    path: Path | None = None
    url: str | None = None

    def raw(self) -> list[bytes]:
        """Every value as the backend holds it."""
        if self.path is not None:
            with contextlib.closing(sqlite3.connect(self.path)) as db:
                return [bytes(row[0]) for row in db.execute("SELECT value FROM replay")]
        with redis.Redis.from_url(self.url or "") as client:
            return [client.get(name) for name in client.keys("numi-mw:replay:*")]

    def expire(self) -> None:
        """Let every value's time to live pass: SQLite's clock moves on; Redis' keys must carry the TTL, then
        their expiry is moved into the past."""
        if self.path is not None:
            self.clock.now += TTL
            return
        with redis.Redis.from_url(self.url or "") as client:
            names = client.keys("numi-mw:replay:*")
            assert names and [client.ttl(name) for name in names] == [TTL] * len(names)
            for name in names:
                client.pexpireat(name, 1)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "redis"])
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Kind:
    if request.param == "sqlite":
        clock = Clock()
        path = tmp_path / "replay.db"
        return Kind("sqlite", SQLiteBackend(str(path), TTL, clock=clock), clock, path=path)
    url: str = request.getfixturevalue("redis_url")
    with redis.Redis.from_url(url) as client:
        client.flushdb()
    return Kind("redis", RedisBackend(url, TTL), url=url)


async def test_a_value_is_found_by_its_scope_and_key(kind: Kind) -> None:
    store = ReplayStore(kind.backend)
    assert await store.remember("scope-a", "k1", VALUE) is True
    assert await store.lookup("scope-a", ["k1", "k2"]) == {"k1": VALUE}
    assert await store.remember("scope-a", "k1", b"[]") is True  # a later answer with the same key replaces it
    assert await store.lookup("scope-a", ["k1"]) == {"k1": b"[]"}
    assert await store.lookup("scope-a", []) == {}
    await store.aclose()


async def test_a_value_is_gone_after_its_time_to_live(kind: Kind) -> None:
    store = ReplayStore(kind.backend)
    await store.remember("scope-a", "k1", VALUE)
    kind.expire()
    assert await store.lookup("scope-a", ["k1"]) == {}
    await store.aclose()


async def test_a_value_over_the_size_bound_is_not_kept(kind: Kind) -> None:
    store = ReplayStore(kind.backend, max_value_bytes=len(VALUE))
    assert await store.remember("scope-a", "fits", VALUE) is True
    assert await store.remember("scope-a", "over", VALUE + b" ") is False
    assert await store.lookup("scope-a", ["fits", "over"]) == {"fits": VALUE}
    await store.aclose()


async def test_one_tenant_never_reads_another_tenants_state(kind: Kind) -> None:
    store = ReplayStore(kind.backend)
    await store.remember("scope-a", "k1", VALUE)
    assert await store.lookup("scope-b", ["k1"]) == {}
    await store.remember("scope-b", "k1", b"[]")
    assert await store.lookup("scope-a", ["k1"]) == {"k1": VALUE}
    assert await store.lookup("scope-b", ["k1"]) == {"k1": b"[]"}
    await store.aclose()


RECORDED_OK = "fixtures/openai-chat/openrouter-claude-4.5-signed-reasoning.buffered.json"


def history(first: str) -> list[dict[str, Any]]:
    """Turn two of a conversation whose user said ``first`` and whose assistant turn ("ok") lost its state."""
    return [
        {"role": "user", "content": first},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "n"},
    ]


async def test_the_same_answer_in_two_conversations_of_one_tenant_is_restored_only_in_its_own(
    kind: Kind, shared_dir: Path
) -> None:
    answer = (shared_dir / RECORDED_OK).read_bytes()  # a signed answer whose content is "ok"
    details = json.loads(answer)["choices"][0]["message"]["reasoning_details"]
    store = ReplayStore(kind.backend)
    turn_one = json.dumps({"model": "m", "messages": [{"role": "user", "content": "secret plan"}]}).encode()
    keys, context = missing_in_body(turn_one)
    assert keys == [] and await store.lookup("scope-a", keys) == {}
    ((key, value),) = answer_states(answer, context)
    assert await store.remember("scope-a", key, value) is True
    other = history("a totally different conversation")  # conversation two: a direct connection sends no reasoning
    found = await store.lookup("scope-a", missing(other))
    assert found == {} and restore(other, found) == 0 and "reasoning_details" not in other[1]
    own = history("secret plan")  # conversation one, turn two
    found = await store.lookup("scope-a", missing(own))
    assert found == {key: value} and restore(own, found) == 1
    assert own[1]["reasoning_details"] == details
    await store.aclose()


async def test_encrypted_values_do_not_hold_the_signature_at_rest(
    kind: Kind, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("NUMI_TEST_REPLAY_KEY", KEY)
    store = ReplayStore(kind.backend, key=encryption_key("NUMI_TEST_REPLAY_KEY"))
    await store.remember("scope-a", "k1", VALUE)
    (raw,) = kind.raw()
    assert SIGNATURE.encode() not in raw and b"reasoning" not in raw
    assert len(raw) == 12 + len(VALUE) + 16  # nonce, ciphertext, tag
    if kind.path is not None:  # the database, and its write-ahead log files while they are there
        files = list(kind.path.parent.glob("replay.db*"))
        assert kind.path in files and all(SIGNATURE.encode() not in f.read_bytes() for f in files)
    assert await store.lookup("scope-a", ["k1"]) == {"k1": VALUE}
    other = ReplayStore(kind.backend, key=bytes(32))
    with caplog.at_level(logging.WARNING, "numi_mw.replay"):
        assert await other.lookup("scope-a", ["k1"]) == {}
    assert [r.getMessage() for r in caplog.records] == [
        f"replay store {kind.name}: decrypt failed (InvalidTag); turns go as the client sent them"
    ]
    await store.aclose()


async def test_a_value_does_not_decrypt_under_another_scope_or_key(kind: Kind) -> None:
    store = ReplayStore(kind.backend, key=bytes(range(32)))
    await store.remember("scope-a", "k1", VALUE)
    (raw,) = kind.raw()
    await kind.backend.put("scope-b", "k1", raw)  # a row copied into another tenant's scope
    await kind.backend.put("scope-a", "k2", raw)  # or under another turn's key
    assert await store.lookup("scope-b", ["k1"]) == {}
    assert await store.lookup("scope-a", ["k1", "k2"]) == {"k1": VALUE}
    await store.aclose()


def broken(kind: Kind) -> Any:
    """The same kind of backend, down: an SQLite file that is no database any more, a Redis port with no server."""
    if kind.path is not None:
        kind.path.write_bytes(b"this is not an sqlite database, and it is long enough to have a header" * 10)
        return kind.backend
    with redis.Redis.from_url(kind.url or "") as client:
        client.flushdb()
    from benchmarks.loopback import free_port

    return RedisBackend(f"redis://127.0.0.1:{free_port()}/0", TTL)


async def test_a_store_that_is_down_finds_nothing_keeps_nothing_and_warns_once_a_minute(
    kind: Kind, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    store = ReplayStore(broken(kind), clock=clock)
    with caplog.at_level(logging.WARNING, "numi_mw.replay"):
        assert await store.lookup("scope-a", ["k1"]) == {}
        clock.now += 30
        assert await store.remember("scope-a", "k1", VALUE) is False
        clock.now += 11  # past the pause after the failure before
        assert await store.lookup("scope-a", ["k1"]) == {}
        clock.now += 20
        assert await store.lookup("scope-a", ["k1"]) == {}
    error = "DatabaseError" if kind.path is not None else "ConnectionError"
    assert [r.getMessage() for r in caplog.records] == [
        f"replay store {kind.name}: lookup failed ({error}); turns go as the client sent them",
        f"replay store {kind.name}: lookup failed ({error}) (2 more failures since the last warning); turns go as "
        "the client sent them",
    ]
    assert all(r.levelname == "WARNING" for r in caplog.records)
    await store.aclose()


async def test_the_sqlite_file_is_created_0600_and_an_existing_one_narrowed(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.db"
    backend = SQLiteBackend(str(fresh))
    with sqlite3.connect(fresh) as reader:  # while a connection is open, the write-ahead log files stay
        reader.execute("SELECT count(*) FROM replay").fetchall()
        await backend.put("s", "k", VALUE)
        files = sorted(tmp_path.glob("fresh.db*"))
    assert [(f.name, stat.S_IMODE(f.stat().st_mode)) for f in files] == [
        ("fresh.db", 0o600),
        ("fresh.db-shm", 0o600),
        ("fresh.db-wal", 0o600),
    ]
    wide = tmp_path / "wide.db"
    wide.touch(mode=0o644)
    os.chmod(wide, 0o644)
    SQLiteBackend(str(wide))
    assert stat.S_IMODE(wide.stat().st_mode) == 0o600


async def test_sqlite_prunes_expired_rows_and_the_rows_past_its_total_bound(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "replay.db"
    backend = SQLiteBackend(str(path), TTL, max_total_bytes=2 * len(VALUE), clock=clock)
    await backend.put("s", "old", VALUE)  # the first write prunes (nothing yet)
    clock.now += TTL  # "old" expires
    await backend.put("s", "a", VALUE)  # prunes: "old" goes
    clock.now += 1
    await backend.put("s", "b", VALUE)
    clock.now += 1
    await backend.put("s", "c", VALUE)  # three live values, over the bound of two
    with sqlite3.connect(path) as db:
        assert sorted(row[0] for row in db.execute("SELECT key FROM replay")) == ["a", "b", "c"]
    clock.now += 60
    await backend.put("s", "d", VALUE)  # the next prune keeps the two that expire last
    with sqlite3.connect(path) as db:
        assert sorted(row[0] for row in db.execute("SELECT key FROM replay")) == ["c", "d"]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("memcached://127.0.0.1", "must be a sqlite:///PATH or redis://HOST:PORT/DB URL, not 'memcached'"),
        ("sqlite:///", "needs a file"),
        ("sqlite:///:memory:", "needs a file"),
        ("sqlite:////nonexistent-dir/x/replay.db", "cannot be opened"),
        ("redis://:secret@/0", "needs a host"),
        ("redis://127.0.0.1:notaport/0", "port that is not a number"),
        ("redis://127.0.0.1:6379/zero", "database must be a number"),
    ],
)
def test_a_bad_store_url_is_refused_at_start_up(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")) as raised:
        open_replay_store(url)
    assert "secret" not in str(raised.value)


def test_options_and_the_key_are_checked_at_start_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path}/replay.db"
    for ttl in (0, -1, True, float("inf"), "60"):
        with pytest.raises(ValueError, match="replay_ttl must be a positive number of seconds"):
            open_replay_store(url, ttl=ttl)  # type: ignore[arg-type]
    for size in (0, 1.5, True):
        with pytest.raises(ValueError, match="replay_max_bytes must be a positive whole number of bytes"):
            open_replay_store(url, max_value_bytes=size)  # type: ignore[arg-type]
    monkeypatch.delenv("NUMI_TEST_REPLAY_KEY", raising=False)
    with pytest.raises(ValueError, match="NUMI_TEST_REPLAY_KEY is not set"):
        open_replay_store(url, key_env="NUMI_TEST_REPLAY_KEY")
    monkeypatch.setenv("NUMI_TEST_REPLAY_KEY", "not base64!")
    with pytest.raises(ValueError, match="is not base64") as raised:
        open_replay_store(url, key_env="NUMI_TEST_REPLAY_KEY")
    assert "not base64!" not in str(raised.value)
    monkeypatch.setenv("NUMI_TEST_REPLAY_KEY", base64.b64encode(bytes(20)).decode())
    with pytest.raises(ValueError, match="must be 16, 24 or 32 bytes"):
        open_replay_store(url, key_env="NUMI_TEST_REPLAY_KEY")
    monkeypatch.setenv("NUMI_TEST_REPLAY_KEY", base64.b64encode(bytes(range(16))).decode())
    assert open_replay_store(url, key_env="NUMI_TEST_REPLAY_KEY").max_value_bytes == DEFAULT_MAX_VALUE_BYTES


def test_the_defaults_and_the_header() -> None:
    assert (DEFAULT_TTL, DEFAULT_MAX_VALUE_BYTES) == (86_400, 4_194_304)
    assert restored_header(0) == []
    assert restored_header(2) == [(b"x-numi-mw-restored", b"2")]


class CountingBackend:
    """A backend that fails every call and counts them."""

    name = "counting"

    def __init__(self) -> None:
        self.calls = 0

    async def get_many(self, scope: str, keys: Sequence[str]) -> dict[str, bytes]:
        self.calls += 1
        raise ConnectionError("down")

    async def put(self, scope: str, key: str, value: bytes) -> None:
        self.calls += 1
        raise ConnectionError("down")

    async def aclose(self) -> None:
        return None


async def test_a_failing_store_is_left_alone_for_ten_seconds_after_each_failure() -> None:
    clock = Clock()
    backend = CountingBackend()
    store = ReplayStore(backend, clock=clock)
    assert await store.lookup("scope-a", ["k1"]) == {}
    assert backend.calls == 1
    clock.now += 9.9
    assert await store.lookup("scope-a", ["k1"]) == {}
    assert await store.remember("scope-a", "k1", VALUE) is False
    assert backend.calls == 1  # not asked while paused: a hanging store costs one request its timeout, not each
    clock.now += 0.1
    assert await store.remember("scope-a", "k1", VALUE) is False
    assert backend.calls == 2  # asked again once the pause is over, and paused again by the failure
    clock.now += 5
    assert await store.lookup("scope-a", ["k1"]) == {}
    assert backend.calls == 2
