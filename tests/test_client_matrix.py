"""The client matrix: real client libraries through ``numi-mw serve`` against the same clients talking directly.

Each client library runs in its own environment, built and cached outside the repository by
``.ci/build-client-envs`` (``NUMI_MW_CLIENTS_PY``: a virtual environment; ``NUMI_MW_CLIENTS_NODE``: a folder with
``node_modules``); rows of an absent environment are skipped. A driver under ``tests/clients/`` runs each client
as a subprocess of that environment's interpreter (bounded in time): turn 1 against a replay of a recorded
provider answer (``../shared/fixtures/openai-chat/``), then turn 2 with the client's own history. Every job runs
twice: through a real ``numi-mw serve --upstream REPLAY --provider P`` process, and straight at the replay
(direct). The replay keeps every request body, so turn 2 is checked as the upstream receives it. The rows of the
clients that drop OpenRouter's signatures and encrypted data (``Client.store``) run a third time, through a sidecar
with a replay store (``--replay-store sqlite:///PATH``, ``docs/replay-store.md``), each job with its own API key
(its own scope): there turn 2 must reach the upstream with every signature and encrypted detail byte for byte.

Checks per client x recording (``docs/clients.md`` lists the results): the turn-1 request streams when the row
streams; the reasoning the client shows equals the recording's reasoning text (shown once); the content and the
tool calls equal the recording's; turn 2 reaches the upstream with the assistant message's content and tool calls
as recorded, with the reasoning the provider's history row wants (``docs/providers.md``: reasoning details with
signatures and encrypted data byte for byte for OpenRouter, the text in ``reasoning_content`` or ``reasoning``
for the others) and no key a chat completions API does not define. The numi_mw path passes every check the
direct path passes ("never worse than direct"); a check the client fails directly too is the client's own loss.
A mid-stream break must reach every client through numi_mw as that client's own error type.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import numi_mw
from tests.clients.replay import ClientReplay
from tests.conftest import SHARED
from tests.e2e_support import fixture_body, sidecar

DRIVERS = Path(__file__).resolve().parent / "clients"
CLIENTS_PY = os.environ.get("NUMI_MW_CLIENTS_PY", "")
CLIENTS_NODE = os.environ.get("NUMI_MW_CLIENTS_NODE", "")
JOB_TIMEOUT = 20
"""Seconds a client may wait on one request (the client's own timeout)."""
CRASH_ATTEMPTS = 2
"""Runs of a driver that crashed (killed by one of ``CRASH_SIGNALS``); the last one's outcome counts."""
CRASH_SIGNALS = frozenset((signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT))
"""The signals of a crash of the driver's own process; a driver killed by any other (SIGKILL, SIGTERM, SIGINT) is
not run again."""
OPENROUTER_CLAUDE_STREAM = "openai-chat/openrouter-claude-sonnet-4.5-reasoning-details.sse"


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameter: str

    def declaration(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": {
                "type": "object",
                "properties": {self.parameter: {"type": "string"}},
                "required": [self.parameter],
            },
        }


@dataclass(frozen=True)
class Recording:
    """A recorded answer, the provider rules it is replayed under, and the recording answering turn 2."""

    name: str
    path: str
    provider: str
    model: str
    then: str
    tool: Tool | None = None

    @property
    def stream(self) -> bool:
        return not self.path.endswith(".json")


RECORDINGS = [
    Recording(
        "openrouter-claude",
        OPENROUTER_CLAUDE_STREAM,
        "openrouter",
        "anthropic/claude-sonnet-4.5",
        OPENROUTER_CLAUDE_STREAM,
    ),
    Recording(
        "openrouter-o3",
        "openai-chat/openrouter-o3-encrypted-reasoning-details.sse",
        "openrouter",
        "openai/o3",
        "openai-chat/openrouter-o3-encrypted-reasoning-details.sse",
    ),
    Recording(
        "deepseek-reasoner",
        "openai-chat/deepseek-reasoner-reasoning-content.sse",
        "deepseek",
        "deepseek-reasoner",
        "openai-chat/deepseek-reasoner-reasoning-content.sse",
    ),
    Recording(
        "xai-grok",
        "openai-chat/xai-grok-3-mini-reasoning-content.stream.jsonl",
        "xai",
        "grok-3-mini",
        "openai-chat/xai-grok-3-mini-reasoning-content.stream.jsonl",
    ),
    Recording(
        "groq-gpt-oss-tool",
        "openai-chat/groq-gpt-oss-120b-reasoning-tool-call.sse",
        "groq",
        "openai/gpt-oss-120b",
        OPENROUTER_CLAUDE_STREAM,
        Tool("get_something_by_name", "Looks a thing up by its name.", "name"),
    ),
    Recording(
        "openrouter-claude",
        "openai-chat/openrouter-claude-4.5-signed-reasoning.buffered.json",
        "openrouter",
        "anthropic/claude-sonnet-4.5",
        "openai-chat/openrouter-claude-4.5-signed-reasoning.buffered.json",
    ),
    Recording(
        "openrouter-gpt-5-mini",
        "openai-chat/openrouter-gpt-5-mini-summary-encrypted.buffered.json",
        "openrouter",
        "openai/gpt-5-mini",
        "openai-chat/openrouter-gpt-5-mini-summary-encrypted.buffered.json",
    ),
    Recording(
        "deepseek-v4-tool",
        "openai-chat/deepseek-v4-flash-reasoning-content-tool-call.buffered.json",
        "deepseek",
        "deepseek-v4-flash",
        "openai-chat/zai-glm-4.7-reasoning-content.buffered.json",  # an answer without tool calls
        Tool("load_capability", "Loads a capability by its id.", "id"),
    ),
    Recording(
        "zai-glm",
        "openai-chat/zai-glm-4.7-reasoning-content.buffered.json",
        "zai",
        "glm-4.7",
        "openai-chat/zai-glm-4.7-reasoning-content.buffered.json",
    ),
]

HISTORY_FIELD = {"deepseek": "reasoning_content", "xai": "reasoning_content", "zai": "reasoning_content"}
"""The reasoning text field of each provider's history row (``docs/providers.md``); OpenRouter keeps details."""
HISTORY_FIELD |= {"groq": "reasoning"}

MESSAGE_KEYS = frozenset(
    {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"}
    | {"reasoning", "reasoning_content", "reasoning_details"}
)
"""The keys of an assistant message in chat completions requests (OpenAI's API reference) and the reasoning fields
of spec 004; anything else is a key the upstream does not define."""
DETAIL_KEYS = frozenset({"type", "text", "signature", "data", "summary", "id", "format", "index"})
"""The fields of a reasoning detail (spec 004 "Reasoning detail")."""


@dataclass(frozen=True)
class Client:
    """A client variant: its driver (``py``, ``node``, or ``transport``: the project's own interpreter), whether
    it streams, buffers or both, the recordings it meets (``None``: all), and the module or error-name prefixes of
    its own error types."""

    name: str
    runtime: str
    errors: tuple[str, ...]
    modes: tuple[bool, ...] = (True, False)
    providers: tuple[str, ...] | None = None
    error_messages: tuple[str, ...] = ()  # how the client words a provider's error event, when it raises a builtin
    store: bool = False  # its OpenRouter rows also run through a sidecar with a replay store


OPENAI_ERRORS = ("openai.",)
CLIENTS = [
    Client("openai-raw", "py", OPENAI_ERRORS),
    Client("openai-helper", "py", OPENAI_ERRORS, modes=(True,)),
    Client("openai-transport", "transport", OPENAI_ERRORS),
    Client("litellm-openai", "py", ("litellm.",), store=True),
    Client("litellm-openrouter", "py", ("litellm.",), providers=("openrouter",), store=True),
    Client("langchain-openai", "py", ("openai.", "langchain_core."), store=True),
    Client(
        "langchain-openrouter",
        "py",
        ("openrouter.", "langchain_core.", "langchain_openrouter."),
        providers=("openrouter",),
        # langchain_openrouter/chat_models.py, ChatOpenRouter._stream: an error chunk raises this ValueError
        error_messages=("OpenRouter API returned an error during streaming: ",),
    ),
    Client("langchain-deepseek", "py", ("openai.", "langchain_core."), providers=("deepseek",)),
    Client("pydantic-ai-openai", "py", ("pydantic_ai.", "openai.")),
    Client("pydantic-ai-openrouter", "py", ("pydantic_ai.", "openai."), providers=("openrouter",)),
    Client("openai-node-helper", "node", ("OpenAIError",), modes=(True,)),
    Client("ai-sdk-openrouter", "node", ("AI_",), providers=("openrouter",)),
    Client("ai-sdk-openai-compatible", "node", ("AI_",)),
]
ERROR_BREAK_AFTER = 5
"""Whole SSE events the replay sends before it drops the connection inside the next one (both error recordings
are still in their reasoning there)."""


def recordings_for(client: Client) -> list[Recording]:
    return [
        r
        for r in RECORDINGS
        if r.stream in client.modes and (client.providers is None or r.provider in client.providers)
    ]


def error_recording(client: Client) -> Recording:
    return next(r for r in recordings_for(client) if r.stream)


@dataclass(frozen=True)
class Row:
    client: Client
    recording: Recording
    error: bool = False

    @property
    def id(self) -> str:
        kind = "midstream-error" if self.error else ("streamed" if self.recording.stream else "buffered")
        return f"{self.client.name}-{self.recording.name}-{kind}"

    @property
    def paths(self) -> tuple[str, ...]:
        """The paths the row runs: ``direct``, ``through`` numi_mw, and ``store`` (numi_mw with a replay store) for
        a client that drops signatures and encrypted data, on OpenRouter's recordings (the ones that carry them)."""
        store = self.client.store and self.recording.provider == "openrouter" and not self.error
        return ("direct", "through", "store") if store else ("direct", "through")


ROWS = [Row(c, r) for c in CLIENTS for r in recordings_for(c)] + [Row(c, error_recording(c), True) for c in CLIENTS]
STORE_ROWS = [row for row in ROWS if "store" in row.paths]


# What the recordings hold ----------------------------------------------------------------------------------


@dataclass
class Expected:
    reasoning: str
    content: str
    tool_calls: list[tuple[str, str, Any]]
    details: list[dict[str, Any]]


def text_of(fields: dict[str, Any]) -> str:
    """The reasoning a client reading one field shows (spec 004 "Streaming": read one of the two)."""
    for name in ("reasoning", "reasoning_content"):
        if isinstance(fields.get(name), str):
            return str(fields[name])
    return ""


def carries_something(detail: dict[str, Any]) -> bool:
    return any(detail.get(key) for key in ("text", "signature", "data", "summary"))


def without_index(detail: dict[str, Any]) -> dict[str, Any]:
    """A detail without its ``index`` (the provider's block position, which clients renumber or drop)."""
    return {k: v for k, v in detail.items() if k != "index"}


def expected(recording: Recording) -> Expected:
    """What the recording says, read field by field: the reasoning text, the content, the tool calls and the
    complete reasoning details (a stream's fragments merged by spec 004's rebuild, "From a stream"; a detail
    that carries no text, signature, data or summary, such as OpenRouter's placeholder, is not one)."""
    raw, _ = fixture_body(recording.path)
    if not recording.stream:
        message = json.loads(raw)["choices"][0]["message"]
        calls = [
            (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in message.get("tool_calls") or []
        ]
        details = [without_index(d) for d in message.get("reasoning_details") or []]
        return Expected(text_of(message), message.get("content") or "", calls, details)
    reasoning, content, fragments = [], [], []
    calls_by_index: dict[int, list[Any]] = {}
    for line in raw.decode().splitlines():
        if not line.startswith("data: {"):
            continue
        chunk = json.loads(line[len("data: ") :])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            reasoning.append(text_of(delta))
            content.append(delta.get("content") or "")
            fragments.extend(delta.get("reasoning_details") or [])
            for call in delta.get("tool_calls") or []:
                entry = calls_by_index.setdefault(call["index"], [None, "", ""])
                entry[0] = entry[0] or call.get("id")
                entry[1] += call.get("function", {}).get("name") or ""
                entry[2] += call.get("function", {}).get("arguments") or ""
    from numi_mw import rebuild_reasoning_details  # spec 004's rebuild, as the project implements it

    details = [without_index(d) for d in rebuild_reasoning_details(fragments) if carries_something(d)]
    calls = [(i, n, json.loads(a)) for i, n, a in (calls_by_index[k] for k in sorted(calls_by_index))]
    return Expected("".join(reasoning), "".join(content), calls, details)


# Running the clients ---------------------------------------------------------------------------------------


def short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} chars)"


def crash_report(stderr: bytes) -> str:
    """The error and the stack of the thread that crashed, from a driver's ``-X faulthandler`` dump of its threads
    (at most 100 of them: past that the crashed one may be left out, and the dump's start is given)."""
    text = stderr.decode(errors="replace")
    # from "Fatal Python error: Segmentation fault" on: what the driver printed before is left out
    fatal = max(text.find("Fatal Python error"), 0)
    start = text.find("Current thread", fatal)
    if start < 0:
        return text[fatal : fatal + 3000]
    end = text.find("\n\n", start)
    error = text[fatal:].partition("\n")[0]
    return f"{error}\n{text[start : end if end >= 0 else None]}"[:3000]


@dataclass
class Matrix:
    """The replay, one sidecar per provider, and each client's results (one driver run per client)."""

    replay: ClientReplay
    stack: contextlib.ExitStack
    node_dir: Path | None
    store_dir: Path
    sidecars: dict[tuple[str, str], str] = field(default_factory=dict)
    results: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, dict[str, dict[str, str | None]]] = field(default_factory=dict)

    def sidecar(self, provider: str, path: str) -> str:
        """The sidecar of ``provider`` for a ``through`` or a ``store`` path (then with an SQLite replay store)."""
        if (provider, path) not in self.sidecars:
            options = ["--provider", provider, "--timeout", str(JOB_TIMEOUT)]
            if path == "store":
                options += ["--replay-store", f"sqlite:///{self.store_dir / provider}.db"]
            self.sidecars[provider, path] = self.stack.enter_context(sidecar(self.replay.base_url, *options))
        return self.sidecars[provider, path]

    def job(self, row: Row, path: str, attempt: int = 1) -> dict[str, Any]:
        """The driver's job for ``row`` on ``path``; ``attempt`` (from 1) is the driver's run, each in its own
        scopes of the replay store."""
        recording = row.recording
        job_id = f"{row.id}/{path}"
        store_key = f"sk-replay-{job_id}" if attempt == 1 else f"sk-replay-{job_id}-run{attempt}"
        headers = {"x-matrix-job": job_id, "x-replay-fixture": recording.path, "x-replay-then": recording.then}
        if row.error:
            headers["x-replay-break-after"] = str(ERROR_BREAK_AFTER)
        direct_url = self.replay.base_url
        through = path != "direct"
        transport = row.client.runtime == "transport"
        return {
            "id": job_id,
            "client": row.client.name,
            "base_url": self.sidecar(recording.provider, path) if through and not transport else direct_url,
            "api_key": store_key if path == "store" else "sk-replay",  # a scope of the store per job and run
            "model": recording.model,
            "stream": recording.stream,
            "headers": headers,
            "timeout": JOB_TIMEOUT,
            "messages": [{"role": "user", "content": "Please answer the question."}],
            "tools": [recording.tool.declaration()] if recording.tool else [],
            "next_user": "Thanks. One more question, please.",
            "tool_result": '{"result": "found"}',
            "provider": recording.provider,
            "through": through,
        }

    def run_client(self, client: Client) -> dict[str, dict[str, Any]]:
        """Each job's result for ``client``, from one run of its driver (``_drive``); a run that failed in any way
        fails every row of the client with the same error, and is never run again into a record that already holds
        its turns."""
        if client.name in self.results:
            return self.results[client.name]
        if client.name in self.failures:
            raise RuntimeError(self.failures[client.name])
        try:
            self.results[client.name] = self._drive(client)
        except Exception as exc:
            self.failures[client.name] = f"{type(exc).__name__}: {exc}"
            raise
        return self.results[client.name]

    def _drive(self, client: Client) -> dict[str, dict[str, Any]]:
        rows = [row for row in ROWS if row.client == client]
        if client.runtime == "node":
            assert self.node_dir is not None
            command = ["node", str(self.node_dir / "node_driver.mjs")]
        elif client.runtime == "py":
            command = [str(Path(CLIENTS_PY) / "bin" / "python"), "-X", "faulthandler", str(DRIVERS / "py_driver.py")]
        else:  # -X faulthandler: a crash prints each thread's Python stack to the stderr reported below
            command = [sys.executable, "-X", "faulthandler", str(DRIVERS / "py_driver.py")]
        env = {**os.environ, "PYTHONPATH": str(DRIVERS.parents[1]), "NO_PROXY": "127.0.0.1"}
        for attempt in range(1, CRASH_ATTEMPTS + 1):
            jobs = [self.job(row, path, attempt) for row in rows for path in row.paths]
            done = subprocess.run(
                command,
                input=json.dumps(jobs).encode(),
                capture_output=True,
                timeout=60 + 2 * JOB_TIMEOUT * len(jobs),
                env=env,
                check=False,
            )
            if -done.returncode not in CRASH_SIGNALS or attempt == CRASH_ATTEMPTS:
                break
            # the client's own interpreter or a native extension of it crashed (a client meets a bad answer with an
            # exception, not a signal): its jobs run once more from turn 1, on a clean record of the replay and in
            # new scopes of the replay store, so that nothing the crashed run kept can make the next one pass
            for job in jobs:
                self.replay.requests.pop(job["id"], None)
            warnings.warn(
                f"{client.name} driver crashed (exit {done.returncode}), ran again: {crash_report(done.stderr)}",
                stacklevel=1,
            )
        if done.returncode != 0:
            said = crash_report(done.stderr) if done.returncode < 0 else done.stderr.decode()[-3000:]
            raise RuntimeError(f"{client.name} driver exited {done.returncode}: {said}")
        return {result["id"]: result for result in json.loads(done.stdout)}

    def outcome(self, row: Row, path: str) -> dict[str, str | None]:
        job_id = f"{row.id}/{path}"
        result = self.run_client(row.client)[job_id]
        requests = self.replay.requests.get(job_id, [])
        if row.error:
            found = error_check(row.client, result)
        else:
            found = checks(row.recording, expected(row.recording), result, requests)
        self.outcomes.setdefault(row.id, {})[path] = found
        return found


def error_check(client: Client, result: dict[str, Any]) -> dict[str, str | None]:
    if result["ok"]:
        return {"client's own error": "the client returned an answer from a broken stream, raising nothing"}
    own = any(name.startswith(client.errors) for name in result["error_mro"]) or (
        bool(client.error_messages) and result["error"].startswith(client.error_messages)
    )
    reason = None if own else f"raised {result['error_type']}: {result['error'].splitlines()[0][:160]}"
    return {"client's own error": reason}


def checks(
    recording: Recording, exp: Expected, result: dict[str, Any], requests: list[dict[str, Any]]
) -> dict[str, str | None]:
    """Every check of a row, by name: ``None`` when it passes, else the reason it fails."""
    found: dict[str, str | None] = {}
    streamed = bool(requests and requests[0].get("stream"))
    found["turn 1 streams as asked"] = None if streamed == recording.stream else f"turn 1 sent stream={streamed}"
    if not result["ok"] and result["stage"] == "turn1":
        failure = f"turn 1 raised {result['error_type']}: {first_line(result['error'])}"
        for name in ("reasoning shown", "content", "tool calls", "turn 2 answered", *HISTORY_CHECKS):
            found[name] = failure
        return found
    shown = result["reasoning"] or ""
    if shown == exp.reasoning:
        found["reasoning shown"] = None
    elif exp.reasoning and shown == exp.reasoning * 2:
        found["reasoning shown"] = "reasoning shown twice"
    else:
        found["reasoning shown"] = f"shows {short(shown)}, recorded {short(exp.reasoning)}"
    content = result["content"] or ""
    found["content"] = None if content == exp.content else f"content {short(content)}, recorded {short(exp.content)}"
    calls = [(c["id"], c["name"], json.loads(c["arguments"] or "{}")) for c in result["tool_calls"]]
    found["tool calls"] = None if calls == exp.tool_calls else f"tool calls {calls}, recorded {exp.tool_calls}"
    found["turn 2 answered"] = (
        None if result["ok"] else f"turn 2 raised {result['error_type']}: {first_line(result['error'])}"
    )
    messages = requests[1].get("messages", []) if len(requests) > 1 else []
    if len(messages) < 2:  # the job's one user message, then the client's assistant message
        if len(requests) < 2:
            missing = "turn 2 never reached the upstream"
        elif requests[1] == requests[0]:  # a client's retry: its timeout or its retry policy is off
            missing = "turn 1 reached the upstream twice (the client sent it again)"
        else:
            missing = "turn 2 carries no assistant message"
        found.update(dict.fromkeys(HISTORY_CHECKS, missing))
        return found
    found.update(history_checks(recording, exp, messages[1]))
    return found


def first_line(text: str) -> str:
    return text.splitlines()[0][:200] if text else ""


HISTORY_CHECKS = (
    "history: role",
    "history: no unknown keys",
    "history: content",
    "history: tool calls",
    "history: reasoning sent",
    "history: reasoning as recorded",
    "history: no duplicated reasoning",
    "history: signatures and encrypted data",
    "history: detail text and format",
    "history: no empty-signature detail",
)


def history_checks(recording: Recording, exp: Expected, message: dict[str, Any]) -> dict[str, str | None]:
    """Turn 2's assistant message as the upstream receives it, check by check."""
    found: dict[str, str | None] = {}
    found["history: role"] = None if message.get("role") == "assistant" else f"role {short(message.get('role'))}"
    details = message.get("reasoning_details")
    details = details if isinstance(details, list) else []
    unknown = sorted(set(message) - MESSAGE_KEYS)
    unknown += sorted({f"reasoning_details[].{k}" for d in details for k in d if k not in DETAIL_KEYS})
    found["history: no unknown keys"] = f"unknown keys {unknown}" if unknown else None
    sent = message.get("content") or ""
    found["history: content"] = None if sent == exp.content else f"content {short(sent)}, recorded {short(exp.content)}"
    calls = [
        (c.get("id"), c.get("function", {}).get("name"), json.loads(c.get("function", {}).get("arguments") or "{}"))
        for c in message.get("tool_calls") or []
    ]
    found["history: tool calls"] = None if calls == exp.tool_calls else f"tool calls {calls}"
    texts = {
        k: message[k] for k in ("reasoning", "reasoning_content") if isinstance(message.get(k), str) and message[k]
    }
    field = HISTORY_FIELD.get(recording.provider)
    if field is None:  # OpenRouter's row: the details as returned, the text at most once beside them
        found["history: reasoning sent"] = None if details or not exp.details else "no reasoning_details"
        wrong = [k for k, text in texts.items() if text != exp.reasoning]
        found["history: reasoning as recorded"] = f"{wrong[0]} {short(texts[wrong[0]])}" if wrong else None
        copies = [path for path in places(message, exp.reasoning) if not path.startswith("reasoning_details")]
        found["history: no duplicated reasoning"] = f"reasoning sent in {sorted(copies)}" if len(copies) > 1 else None
    else:  # the text in the provider's one history field, no other reasoning field
        got = message.get(field)
        # a fragment of the reasoning is not the reasoning sent back (openai-node keeps only the last delta's)
        sent = got == exp.reasoning or not exp.reasoning
        found["history: reasoning sent"] = (
            None if sent else (f"{field} not the recorded text" if got else f"no {field}")
        )
        found["history: reasoning as recorded"] = (
            None if got is None or got == exp.reasoning else f"{field} {short(got)}, recorded {short(exp.reasoning)}"
        )
        copies = [path for path in places(message, exp.reasoning) if path != field]
        copies += [k for k in ("reasoning", "reasoning_content", "reasoning_details") if k != field and k in message]
        found["history: no duplicated reasoning"] = f"also sends {sorted(set(copies))}" if copies else None
    want_details = exp.details if field is None else []
    opaque = [opaque_part(d) for d in details if d.get("signature") or d.get("data")]
    want_opaque = [opaque_part(d) for d in want_details if d.get("signature") or d.get("data")]
    if opaque == want_opaque:
        found["history: signatures and encrypted data"] = None
    elif len(opaque) != len(want_opaque):
        found["history: signatures and encrypted data"] = (
            f"{len(opaque)} signed or encrypted details, recorded {len(want_opaque)}"
        )
    else:
        found["history: signatures and encrypted data"] = "a signature, encrypted data or id differs from the recording"
    kept = [without_index(d) for d in details if carries_something(d)]  # judged on what is sent; a loss is above
    found["history: detail text and format"] = (
        None if not kept or kept == want_details or field is not None else details_difference(kept, want_details)
    )
    empty = [d for d in details if d.get("signature") == ""]
    found["history: no empty-signature detail"] = f'{len(empty)} detail(s) with signature ""' if empty else None
    return found


def places(value: Any, text: str, path: str = "") -> list[str]:
    """The paths inside a message where the string ``text`` is a whole value (how often the reasoning is sent)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in places(v, text, f"{path}.{k}" if path else k)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in places(v, text, f"{path}[{i}]")]
    return [path] if text and value == text else []


def opaque_part(detail: dict[str, Any]) -> tuple[Any, ...]:
    """What a provider verifies in a detail: its type, signature, encrypted data and id, compared byte for byte."""
    return (detail.get("type"), detail.get("signature"), detail.get("data"), detail.get("id"))


def details_difference(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> str:
    if not got:
        return "no reasoning details"
    if len(got) != len(want):
        return f"{len(got)} reasoning details, recorded {len(want)}: {[short(d, 80) for d in got]}"
    for number, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        for key in sorted(set(mine) | set(theirs)):
            if key not in mine or key not in theirs or mine[key] != theirs[key]:
                got = short(mine[key]) if key in mine else "absent"
                return f"reasoning_details[{number}].{key} {got}, recorded {short(theirs[key]) if key in theirs else 'absent'}"
    return "reasoning details differ"


# The tier --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent: the client matrix replays recorded traffic from it")
    node_dir = None
    if CLIENTS_NODE:
        node_dir = tmp_path_factory.mktemp("node-driver")
        (node_dir / "node_modules").symlink_to(Path(CLIENTS_NODE) / "node_modules")
        shutil.copy(DRIVERS / "node_driver.mjs", node_dir / "node_driver.mjs")
    with contextlib.ExitStack() as stack:
        replay = stack.enter_context(ClientReplay().running())
        found = Matrix(replay, stack, node_dir, tmp_path_factory.mktemp("replay-store"))
        yield found
        report = os.environ.get("NUMI_MW_CLIENTS_REPORT")
        if report:
            Path(report).write_text(json.dumps(found.outcomes, indent=1, sort_keys=True))


def skip_reason(client: Client) -> str | None:
    if client.runtime == "py" and not CLIENTS_PY:
        return "NUMI_MW_CLIENTS_PY is not set: build the client environments with .ci/build-client-envs"
    if client.runtime == "node" and not CLIENTS_NODE:
        return "NUMI_MW_CLIENTS_NODE is not set: build the client environments with .ci/build-client-envs"
    if client.runtime == "transport" and not hasattr(numi_mw, "SyncNormalizingTransport"):
        return "numi_mw.NormalizingTransport (and its sync twin) is not in this version of numi_mw"
    return None


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_client_through_numi_mw_is_never_worse_than_direct(matrix: Matrix, row: Row) -> None:
    reason = skip_reason(row.client)
    if reason:
        pytest.skip(reason)
    direct = matrix.outcome(row, "direct")
    through = matrix.outcome(row, "through")
    if row.error:  # through numi_mw the break is the client's own error, whatever the direct break gives
        assert through == {"client's own error": None}, f"through numi_mw: {through}; direct: {direct}"
        return
    worse = {name: reason for name, reason in through.items() if reason is not None and direct.get(name) is None}
    assert not worse, f"through numi_mw fails where direct passes: {worse}; direct: {direct}"


SIGNATURES = "history: signatures and encrypted data"


@pytest.mark.parametrize("row", STORE_ROWS, ids=[row.id for row in STORE_ROWS])
def test_a_replay_store_gives_back_the_signatures_a_client_drops(matrix: Matrix, row: Row) -> None:
    """Turn 2 of a client that drops OpenRouter's signatures and encrypted data reaches the upstream with every one
    of them byte for byte through a sidecar with a replay store (``docs/replay-store.md``), and the store makes no
    check fail that the plain sidecar passes."""
    reason = skip_reason(row.client)
    if reason:
        pytest.skip(reason)
    direct = matrix.outcome(row, "direct")
    through = matrix.outcome(row, "through")
    stored = matrix.outcome(row, "store")
    assert direct[SIGNATURES] is not None, f"the client no longer drops them direct: {direct}"
    assert stored[SIGNATURES] is None, f"through numi_mw with a replay store: {stored}"
    worse = {name: reason for name, reason in stored.items() if reason is not None and through.get(name) is None}
    assert not worse, f"with a replay store fails where numi_mw alone passes: {worse}; through: {through}"
