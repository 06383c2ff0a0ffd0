"""The ``numi-mw`` command: ``serve`` (the sidecar), ``request`` and ``response`` (show what the sidecar sends
upstream and back), ``rebuild`` (rebuild streamed reasoning details)."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import math
import os
import re
import socket
import sys
from collections.abc import Callable, Sequence
from functools import partial
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from numi_mw.asgi import DEFAULT_MAX_HEADER_BYTES, DEFAULT_MAX_HEADER_COUNT
from numi_mw.catalog_files import DEFAULT_CATALOG, default_catalog, read_catalog, read_text
from numi_mw.core import build as core_build
from numi_mw.core.accumulate import rebuild_from_body
from numi_mw.core.adapters import WIRE_APIS
from numi_mw.core.catalog import Catalog, CatalogError, unknown_efforts, unknown_keys
from numi_mw.core.codec import UNDECODABLE, decode_lenient, decoder, encode, encode_lenient
from numi_mw.core.errors import ApiError, invalid_request, is_error_body
from numi_mw.core.providers import PROVIDERS, WIRE_API_NAMES, ProviderRules, infer_provider, provider_rules
from numi_mw.core.request import DEFAULT_MAX_BODY_BYTES, prepare_request
from numi_mw.core.response import (
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    StreamRewriter,
    choose_rewriter,
    response_options,
    think_tags_for,
)
from numi_mw.core.routing import fixed_route, rules_for
from numi_mw.core.sse import EventTooLarge, SSEDecoder
from numi_mw.core.think import THINK_STARTS, ThinkTags
from numi_mw.core.usage import usage_rules
from numi_mw.proxy.ops import LOG_FORMATS, LOG_LEVELS, lean_log_records, log_config
from numi_mw.replay_store import DEFAULT_MAX_VALUE_BYTES, DEFAULT_TTL
from numi_mw.upstream import DEFAULT_UPSTREAM_TRANSPORT, UPSTREAM_TRANSPORTS

if TYPE_CHECKING:
    from starlette.applications import Starlette

log = logging.getLogger("numi_mw.serve")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1 to 65535)")
    return value


def _positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'whole ' if kind is int else ''}number") from None
        if not math.isfinite(value):  # nan and inf: no time a timeout or a lifetime could be
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
        return value

    return parse


WORKERS_PER_CORE = 4
"""``--workers`` may ask for at most this many processes per core of the machine (``os.cpu_count()``): each worker
holds a whole sidecar (tens of MB), so a count past it is a typo that would exhaust memory, not a setting."""


def _workers(text: str) -> int:
    count = int(_positive(int)(text))
    most = WORKERS_PER_CORE * (os.cpu_count() or 1)
    if count > most:
        raise argparse.ArgumentTypeError(
            f"{text!r} is more than {most} worker processes ({WORKERS_PER_CORE} per core of this machine)"
        )
    return count


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line on stderr (``PROG: error: MESSAGE``), without the usage
    block argparse prints before it; ``--help`` shows the usage. Its subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


_OPTION_NAME = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")


def _as_flags(message: str, args: argparse.Namespace) -> str:
    """``message`` of an error the app's options raised (written for the Python API, ``replay_ttl``) with each name
    of an option this command has written as its flag (``--replay-ttl``)."""
    names = vars(args)
    return _OPTION_NAME.sub(lambda found: "--" + found[0].replace("_", "-") if found[0] in names else found[0], message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="numi-mw", description="Make LLM reasoning traffic correct.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('numi_mw')}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the sidecar: a streaming reverse proxy in front of an upstream")
    target = serve.add_mutually_exclusive_group()
    target.add_argument(
        "--upstream", help="one upstream base URL, e.g. https://openrouter.ai/api/v1 (default: route by a catalog)"
    )
    target.add_argument(
        "--catalog", metavar="FILE", help="route through this model catalog (default: the packaged catalog)"
    )
    serve.add_argument(
        "--provider",
        choices=sorted(PROVIDERS),
        help="the upstream's rules (default: inferred from its host: local for a loopback host, generic for an "
        "unknown one)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8787, help="port to listen on, 1 to 65535 (default 8787)")
    serve.add_argument(
        "--workers",
        type=_workers,
        default=1,
        metavar="N",
        help="worker processes sharing the port, each with its own event loop, upstream pool and metrics, at "
        f"most {WORKERS_PER_CORE} per core (default 1; docs/sidecar.md)",
    )
    serve.add_argument(
        "--max-body-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"chat completions request body limit in bytes (default {DEFAULT_MAX_BODY_BYTES})",
    )
    serve.add_argument(
        "--max-header-count",
        type=_positive(int),
        default=DEFAULT_MAX_HEADER_COUNT,
        help=f"most request headers taken; 431 above it (default {DEFAULT_MAX_HEADER_COUNT})",
    )
    serve.add_argument(
        "--max-header-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_HEADER_BYTES,
        help=f"most bytes of request header names and values; 431 above it (default {DEFAULT_MAX_HEADER_BYTES})",
    )
    serve.add_argument(
        "--max-event-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_EVENT_BYTES,
        help=f"most bytes of one upstream SSE event; past it the stream ends with its error event "
        f"(default {DEFAULT_MAX_EVENT_BYTES})",
    )
    serve.add_argument(
        "--max-response-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_RESPONSE_BYTES,
        help=f"most bytes of one buffered upstream answer, decoded; 502 past it (default {DEFAULT_MAX_RESPONSE_BYTES})",
    )
    serve.add_argument(
        "--timeout",
        type=_positive(float),
        default=600.0,
        help="upstream read, write and pool timeout in seconds (default 600; connecting has 10)",
    )
    serve.add_argument(
        "--upstream-transport",
        choices=UPSTREAM_TRANSPORTS,
        default=DEFAULT_UPSTREAM_TRANSPORT,
        help="what opens the upstream connections: aiohttp (less CPU per request under concurrency), or httpcore "
        f"(httpx's own; docs/sidecar.md) (default {DEFAULT_UPSTREAM_TRANSPORT})",
    )
    serve.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="log level, debug at most: uvicorn's trace would log headers and queries (default info)",
    )
    _think_arguments(serve, catalog=True)
    _preserve_argument(serve)
    _wire_argument(serve)
    _ops_arguments(serve)
    _replay_arguments(serve)

    response = commands.add_parser(
        "response", help="read an upstream response (JSON or SSE) on stdin, write what the client receives"
    )
    response.add_argument(
        "--request", required=True, metavar="REQUEST.json", help="the client's request body (required)"
    )
    response.add_argument(
        "--provider", choices=sorted(PROVIDERS), default="generic", help="target provider (default: generic)"
    )
    _think_arguments(response)
    _wire_argument(response)

    commands.add_parser(
        "rebuild",
        help="read an SSE stream or a JSON list of fragments on stdin, print the rebuilt reasoning details",
    )

    request = commands.add_parser(
        "request", help="read a client request body on stdin, write the body sent upstream on stdout"
    )
    request.add_argument(
        "--provider", choices=sorted(PROVIDERS), help="target provider (default: generic; not with --catalog)"
    )
    request.add_argument(
        "--catalog",
        metavar="FILE",
        help="route through this catalog; prints {route, body} instead of the body (default: one provider)",
    )
    request.add_argument(
        "--session-id", help="the x-session-id header the request would carry, with --catalog (default: none)"
    )
    _preserve_argument(request)
    _wire_argument(request)

    catalog = commands.add_parser("catalog", help="model catalog tools")
    catalog_commands = catalog.add_subparsers(dest="catalog_command", required=True, metavar="COMMAND")
    check = catalog_commands.add_parser("check", help="load a catalog file and report its errors and warnings")
    check.add_argument("file", metavar="FILE", help="the catalog file (TOML)")
    return parser


def _ops_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="log lines as text or as JSON objects, one per line (default text)",
    )
    parser.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="log one line per request at info on numi_mw.access (default: on; off saves its CPU time)",
    )
    parser.add_argument(
        "--ops-prefix",
        metavar="PREFIX",
        default="",
        help="path prefix of /healthz, /readyz and /metrics, e.g. /numi-mw; never /v1 (default: none, at the root)",
    )
    parser.add_argument(
        "--metrics",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve Prometheus metrics at PREFIX/metrics (default: on)",
    )


def _replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--replay-store",
        metavar="URL",
        help="keep the opaque reasoning state of relayed turns and put it back when a client drops it: "
        "sqlite:///PATH or redis://HOST:PORT/DB (default: off; docs/replay-store.md)",
    )
    parser.add_argument(
        "--replay-ttl",
        type=_positive(float),
        default=DEFAULT_TTL,
        metavar="SECONDS",
        help=f"with --replay-store: seconds a stored turn lives (default {DEFAULT_TTL})",
    )
    parser.add_argument(
        "--replay-max-bytes",
        type=_positive(int),
        default=DEFAULT_MAX_VALUE_BYTES,
        metavar="N",
        help=f"with --replay-store: largest stored turn in bytes; larger ones are not kept "
        f"(default {DEFAULT_MAX_VALUE_BYTES})",
    )
    parser.add_argument(
        "--replay-key-env",
        metavar="NAME",
        help="with --replay-store: encrypt stored turns with the AES key (base64) in this environment variable "
        "(default: not encrypted)",
    )


def _wire_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wire-api",
        choices=WIRE_API_NAMES,
        default=None,
        help="with one upstream: the wire API it speaks (default openai-chat): clients keep speaking chat "
        "completions, numi_mw translates to anthropic-messages or openai-responses and back",
    )


def _preserve_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--preserve-reasoning",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with one upstream: replay reasoning in history where the provider takes it (default: on; "
        "a catalog says it per model)",
    )


def _think_arguments(parser: argparse.ArgumentParser, *, catalog: bool = False) -> None:
    parser.add_argument(
        "--think-tags",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="split <think> tags out of content (default: on for provider local, off otherwise)",
    )
    parser.add_argument(
        "--think-start",
        choices=THINK_STARTS,
        default=None,
        help="where a stream starts: content, reasoning (the template opened the tag), auto "
        + ("(default: the catalog model's think_start, else content)" if catalog else "(default content)"),
    )


def _think(args: argparse.Namespace, rules: ProviderRules) -> ThinkTags | None:
    return think_tags_for(rules, args.think_tags, args.think_start)


def _response(args: argparse.Namespace) -> int:
    rules = provider_rules(args.provider)
    try:
        with open(args.request, "rb") as file:
            request_body = file.read()
    except OSError as exc:
        sys.stderr.write(f"numi-mw response: cannot read --request {args.request}: {exc.strerror}\n")
        return 2
    try:
        prepared = prepare_request(request_body, fixed_route(rules, wire_api=args.wire_api))
    except ApiError as error:
        sys.stdout.buffer.write(error.to_bytes() + b"\n")
        return 1
    body = sys.stdin.buffer.read()
    options = response_options(
        prepared.translation, prepared.controls.exclude, _think(args, rules), usage=usage_rules(rules)
    )
    # no headers on stdin: a body that opens like JSON is a buffered answer (or an error body), one that opens
    # like SSE (a field or a comment line) a stream; anything else is a stream when the request asked for one,
    # and a buffered answer that is not JSON when it did not
    start = body.lstrip()
    if start[:1] in (b"{", b"["):
        streamed = False
    elif start[:1] == b":" or start.startswith((b"data:", b"event:", b"id:", b"retry:")):
        streamed = True
    else:
        streamed = prepared.stream
    content_type = "text/event-stream" if streamed else "application/json"
    status = 200
    adapter = WIRE_APIS.get(args.wire_api)
    value = UNDECODABLE if streamed else decode_lenient(body)  # a buffered answer, decoded once
    if adapter is None:
        not_an_answer = _not_an_answer(body, value, streamed)
        if not_an_answer is not None:
            sys.stdout.buffer.write(not_an_answer.to_bytes() + b"\n")
            return 1
        if is_error_body(value):
            sys.stdout.buffer.write(body)  # the upstream's own error: the client gets it as it came
            return 1
    elif value is not UNDECODABLE and (is_error_body(value) or adapter.error(value) is not None):
        status = 400  # an error body (the wire API's own, or OpenAI's): handled as an upstream's error is
    rewriter = choose_rewriter(options, status, content_type)
    if rewriter is None:  # an error body the wire API does not translate goes out as it came
        sys.stdout.buffer.write(body)
        return 1
    try:
        out = rewriter.feed(body) + rewriter.finish()
    except ApiError as error:  # past a bound (docs/security.md): what the sidecar would send
        out = rewriter.fail(error) if isinstance(rewriter, StreamRewriter) else error.to_bytes()
        status = error.status
    sys.stdout.buffer.write(out)
    refused = status != 200 or (not isinstance(rewriter, StreamRewriter) and rewriter.status is not None)
    return 1 if refused else 0


_PASSED = "the sidecar would pass it to the client as it came"


def _not_an_answer(body: bytes, value: Any, streamed: bool) -> ApiError | None:
    """Why ``body``, given to ``numi-mw response`` for a chat completions route, is not an upstream's answer at
    all (``docs/cli.md``), or ``None`` when it is one: a JSON object with a ``choices`` array or an ``error``
    object, or a stream with at least one event whose data is a JSON object or ``[DONE]``. ``value`` is the
    buffered body decoded (``UNDECODABLE`` when it is not JSON); a stream's is not read."""
    if not body.strip():
        return ApiError("invalid_json", "The response on stdin is empty; send the upstream's body.")
    if not streamed:
        if value is UNDECODABLE:
            return ApiError("invalid_json", f"The response on stdin is not JSON; {_PASSED}.")
        if isinstance(value, dict) and (isinstance(value.get("choices"), list) or is_error_body(value)):
            return None
        return invalid_request(
            f"The response on stdin is not a chat completion (an object with a choices array); {_PASSED}.", "choices"
        )
    decoder = SSEDecoder(DEFAULT_MAX_EVENT_BYTES)
    try:
        events = decoder.feed(body) + decoder.flush()
    except EventTooLarge:  # an event over the bound: the rewriter ends the stream as the sidecar does
        return None
    for event in events:
        data = event.data
        if data is not None and (data == b"[DONE]" or isinstance(decode_lenient(data), dict)):
            return None
    return invalid_request(f"The response on stdin is not an SSE stream of chat completion chunks; {_PASSED}.")


def _rebuild(args: argparse.Namespace) -> int:
    body = sys.stdin.buffer.read()
    try:
        details = rebuild_from_body(body)
    except ApiError as error:  # input that is not fragments: the error body, as ``request`` writes one
        sys.stdout.buffer.write(error.to_bytes() + b"\n")
        return 1
    sys.stdout.buffer.write(encode_lenient(details) + b"\n")
    return 0


def _warn(path: str, text: bytes, catalog: Catalog) -> None:
    """Write the warnings about a catalog file to stderr: keys no field reads (ignored) and effort names outside
    spec 004's list (used as written, so a typo reroutes requests)."""
    for warning in unknown_keys(text, path):
        sys.stderr.write(f"{path}: warning: {warning} (ignored)\n")
    for warning in unknown_efforts(catalog):
        sys.stderr.write(f"{path}: warning: {warning}\n")


def _catalog(args: argparse.Namespace) -> int:
    try:
        catalog = read_catalog(args.file)
    except CatalogError as error:
        sys.stderr.write(f"{error}\n")
        return 1
    _warn(args.file, read_text(args.file), catalog)
    endpoints = sum(len(model.endpoints) for model in catalog.models)
    print(f"{args.file}: ok: {len(catalog.providers)} providers, {len(catalog.models)} models, {endpoints} endpoints")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from numi_mw.serve_loop import UVICORN_LOOP

    catalog: Catalog | None = None
    if args.upstream is None and args.provider is not None:
        sys.stderr.write("numi-mw serve: --provider goes with --upstream; a catalog names each provider\n")
        return 2
    if args.upstream is None and (args.wire_api is not None or args.preserve_reasoning is not None):
        sys.stderr.write(
            "numi-mw serve: --wire-api and --preserve-reasoning go with --upstream; a catalog says them per "
            "provider and model\n"
        )
        return 2
    if args.upstream is None:
        try:
            catalog = read_catalog(args.catalog) if args.catalog else default_catalog()
        except CatalogError as error:
            sys.stderr.write(f"numi-mw serve: {error}\n")
            return 2
        if args.catalog:
            _warn(args.catalog, read_text(args.catalog), catalog)
    try:
        app = _sidecar_app(args, catalog)
    except ValueError as error:
        sys.stderr.write(f"numi-mw serve: {_as_flags(str(error), args)}\n")
        return 2
    # The upstream's own date and server headers pass through; uvicorn adds none of its own. uvicorn's access log
    # is replaced by numi_mw.access (method, path, status, sizes, timings, route: never a body, query or key).
    # X-Forwarded-For and X-Forwarded-Proto go upstream as the client sent them; uvicorn's proxy headers middleware,
    # which would rewrite the ASGI scope's client and scheme from them, is left out: the sidecar reads neither
    # (about 1 % of a request's instructions, docs/performance.md, "The floor of the stack").
    # With workers, each worker process builds its own app from the same arguments and the catalog read here once
    # (an app holds a pool, a lifespan and a replay store connection, none of which crosses a process boundary).
    # One process runs on uvloop accepting a burst of connections at once (numi_mw.serve_loop); workers share one
    # listening socket, and one of them taking a whole burst would keep it (clients keep their connections) while
    # the others idle, so each takes connections as uvloop does, one per round of its loop (docs/sidecar.md).
    config = uvicorn.Config(
        app if args.workers == 1 else partial(_worker_app, args, catalog),
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        log_config=log_config(args.log_level, args.log_format, access_log=args.access_log),
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,
        workers=args.workers,
        factory=args.workers > 1,
        loop=UVICORN_LOOP if args.workers == 1 else "auto",  # auto: uvicorn's own, uvloop where installed
    )
    _log_start(args, catalog)
    problem = listen_problem(args.host, args.port)
    if problem is not None:
        sys.stderr.write(f"numi-mw serve: {problem}\n")
        return 2
    if args.workers == 1:
        _settle_process()
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C once the server has shut down, as uvicorn.run takes it
            uvicorn.Server(config).run()
    else:
        from uvicorn.supervisors import Multiprocess

        Multiprocess(config, sockets=[config.bind_socket()]).run()
    return 0


COLLECTOR_THRESHOLDS = (10_000, 10, 10)
"""The cycle collector's thresholds in a ``numi-mw serve`` process (``gc.set_threshold``; CPython's defaults are
700, 10, 10): a collection of the youngest generation once container allocations outnumber frees by 10,000,
not 700. A request through the sidecar leaves no reference cycle, so every collection finds next to nothing,
and each one pauses every stream on the event loop. ``docs/performance.md`` ("The cycle collector") has the
measurements."""


def _settle_collector() -> None:
    """Settle the cycle collector of a sidecar process whose app is built: one full collection of what start-up
    left (argument parsing, imports), then ``gc.freeze`` moves every object left into the permanent generation,
    which no collection walks again, and the thresholds become ``COLLECTOR_THRESHOLDS``. Called once per process
    (each worker settles its own) just before it serves; an app the caller serves itself (``proxy.create_app``)
    leaves its process's collector alone."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


def _settle_process() -> None:
    """What a sidecar process settles once its app is built, just before it serves: its cycle collector
    (``_settle_collector``) and its log records (``ops.lean_log_records``)."""
    lean_log_records()
    _settle_collector()


def _worker_app(args: argparse.Namespace, catalog: Catalog | None) -> Starlette:
    """The app factory of ``numi-mw serve --workers N`` (N > 1): each worker process builds its own sidecar app
    (``_sidecar_app``) and settles itself (``_settle_process``)."""
    app = _sidecar_app(args, catalog)
    _settle_process()
    return app


def _sidecar_app(args: argparse.Namespace, catalog: Catalog | None) -> Starlette:
    """The sidecar app ``numi-mw serve``'s arguments describe (``proxy.create_app``).

    Raises:
        ValueError: what ``create_app`` refuses.
    """
    import httpx

    from numi_mw.proxy import create_app

    return create_app(
        args.upstream,
        catalog=catalog,
        provider=args.provider,
        max_body_bytes=args.max_body_bytes,
        max_header_count=args.max_header_count,
        max_header_bytes=args.max_header_bytes,
        max_event_bytes=args.max_event_bytes,
        max_response_bytes=args.max_response_bytes,
        timeout=httpx.Timeout(args.timeout, connect=10.0),
        think_tags=args.think_tags,
        think_start=args.think_start,
        preserve_reasoning=args.preserve_reasoning is not False,
        wire_api=args.wire_api,
        ops_prefix=args.ops_prefix,
        metrics=args.metrics,
        replay_store=args.replay_store,
        replay_ttl=args.replay_ttl,
        replay_max_bytes=args.replay_max_bytes,
        replay_key_env=args.replay_key_env,
        upstream_transport=args.upstream_transport,
    )


def listen_problem(host: str, port: int) -> str | None:
    """Why the sidecar cannot listen on ``host`` and ``port``, or ``None``: the host does not resolve, or an
    address it resolves to cannot be bound (taken, or not this machine's). Each address is bound once, as the
    server will bind it (``SO_REUSEADDR``, as asyncio's ``create_server`` sets on Unix), and let go again, so that
    a refusal is one line and exit status 2 rather than uvicorn's start-up failure (exit 3)."""
    where = f"cannot listen on --host {host!r} --port {port}"
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):  # socket.gaierror is an OSError; an over-long label is a UnicodeError
        return f"{where}: the host does not resolve to an address"
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                return f"{where}: {(exc.strerror or type(exc).__name__).lower()}"
    return None


def _log_start(args: argparse.Namespace, catalog: Catalog | None) -> None:
    """Say at start-up where requests go and by which rules: the provider and wire API of the upstream (and
    whether the provider was inferred from its host), or of every catalog provider; the operations paths; and which
    build of the core runs (``numi_mw.core.build``), so that a compiled build that failed to reach the path shows."""
    if catalog is None:
        origin = "--provider" if args.provider is not None else "inferred from the host; --provider picks another"
        name = provider_rules(args.provider or infer_provider(args.upstream)).name
        log.info(
            "upstream %s: provider %s (%s), wire API %s",
            _safe_url(args.upstream),
            name,
            origin,
            args.wire_api or "openai-chat",
        )
    else:
        source = args.catalog or f"numi_mw/{DEFAULT_CATALOG}"
        for provider in catalog.providers:
            log.info(
                "catalog %s: provider %s at %s: rules %s, wire API %s",
                source,
                provider.name,
                _safe_url(provider.base_url),
                rules_for(provider).name,
                provider.wire_api,
            )
    if args.replay_store:
        where = args.replay_store if args.replay_store.startswith("sqlite:") else _safe_url(args.replay_store)
        log.info(
            "replay store %s: turns live %g s, at most %d bytes each, %s",
            where,
            args.replay_ttl,
            args.replay_max_bytes,
            "encrypted" if args.replay_key_env else "not encrypted",
        )
    paths = ["healthz", "readyz", *(["metrics"] if args.metrics else [])]
    log.info("operations: %s", ", ".join(f"{args.ops_prefix}/{path}" for path in paths))
    log.info("numi_mw core: %s", core_build())


def _safe_url(url: str) -> str:
    """``url`` without its user info and query, which can carry a key."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _request(args: argparse.Namespace) -> int:
    if args.session_id and not args.catalog:
        sys.stderr.write("numi-mw request: --session-id needs --catalog\n")
        return 2
    if args.catalog and args.provider is not None:
        sys.stderr.write("numi-mw request: --provider goes without --catalog; a catalog names each provider\n")
        return 2
    if args.catalog and (args.wire_api or args.preserve_reasoning is not None):
        sys.stderr.write(
            "numi-mw request: --wire-api and --preserve-reasoning go with one provider; a catalog says them per "
            "provider and model\n"
        )
        return 2
    target: Any
    if args.catalog:
        try:
            target = read_catalog(args.catalog)
        except CatalogError as error:
            sys.stderr.write(f"numi-mw request: {error}\n")
            return 2
    else:
        preserve = args.preserve_reasoning is not False
        target = fixed_route(provider_rules(args.provider or "generic"), preserve=preserve, wire_api=args.wire_api)
    body = sys.stdin.buffer.read()
    headers = {"x-session-id": args.session_id} if args.session_id else {}
    try:
        prepared = prepare_request(body, target, headers=headers)
    except ApiError as error:
        sys.stdout.buffer.write(error.to_bytes() + b"\n")
        return 1
    if args.catalog:
        out = {"route": prepared.route.describe(), "body": decoder.decode(prepared.body)}
        sys.stdout.buffer.write(encode(out) + b"\n")
    else:
        sys.stdout.buffer.write(prepared.body if prepared.body.endswith(b"\n") else prepared.body + b"\n")
    if prepared.adjustments:  # what the sidecar would say in x-numi-mw-adjustments, after the body's line
        sys.stdout.flush()
        sys.stderr.write("numi-mw request: adjustments: " + ", ".join(prepared.adjustments) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``numi-mw``; returns the process exit status (0 ok, 1 request rejected, 2 usage error)."""
    args, unknown = _parser().parse_known_args(argv)
    if unknown:  # named with the command they were given to, which argparse's own error would not say
        sys.stderr.write(f"numi-mw {args.command}: error: unrecognized arguments: {' '.join(unknown)}\n")
        return 2
    if getattr(args, "think_tags", None) is False and getattr(args, "think_start", None) is not None:
        sys.stderr.write(f"numi-mw {args.command}: --think-start has no effect with --no-think-tags\n")
        return 2
    commands = {
        "serve": _serve,
        "request": _request,
        "response": _response,
        "rebuild": _rebuild,
        "catalog": _catalog,
    }
    return commands[args.command](args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
