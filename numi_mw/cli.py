"""The ``numi-mw`` command: ``serve`` (the sidecar), ``request`` and ``response`` (show what the sidecar sends
upstream and back), ``rebuild`` (rebuild streamed reasoning details)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from numi_mw.core.codec import encode
from numi_mw.core.details import fragments_from_body, rebuild_reasoning_details
from numi_mw.core.errors import ApiError
from numi_mw.core.providers import PROVIDERS, ProviderRules, get_provider
from numi_mw.core.reasoning_text import ThinkTags
from numi_mw.core.request import DEFAULT_MAX_BODY_BYTES, prepare_request
from numi_mw.core.response import Mode, ResponseOptions, ResponseRewriter, think_tags_for


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="numi-mw", description="Make LLM reasoning traffic correct.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the sidecar: a streaming reverse proxy in front of an upstream")
    serve.add_argument("--upstream", required=True, help="upstream base URL, e.g. https://openrouter.ai/api/v1")
    serve.add_argument(
        "--provider", choices=sorted(PROVIDERS), help="the upstream's rules (default: inferred from its host)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8787, help="port to listen on (default 8787)")
    serve.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES, help="request body limit in bytes")
    serve.add_argument("--timeout", type=float, default=600.0, help="upstream read timeout in seconds")
    serve.add_argument("--log-level", default="info", help="uvicorn log level (default info)")
    _think_arguments(serve)

    response = commands.add_parser(
        "response", help="read an upstream response (JSON or SSE) on stdin, write what the client receives"
    )
    response.add_argument("--request", required=True, metavar="REQUEST.json", help="the client's request body")
    response.add_argument("--provider", choices=sorted(PROVIDERS), default="generic", help="target provider")
    _think_arguments(response)

    commands.add_parser(
        "rebuild",
        help="read an SSE stream or a JSON list of fragments on stdin, print the rebuilt reasoning details",
    )

    request = commands.add_parser(
        "request", help="read a client request body on stdin, write the body sent upstream on stdout"
    )
    request.add_argument("--provider", choices=sorted(PROVIDERS), default="generic", help="target provider")
    return parser


def _think_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--think-tags",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="split <think> tags out of content (default: on for provider local, off otherwise)",
    )
    parser.add_argument(
        "--think-start",
        choices=["content", "reasoning", "auto"],
        default="content",
        help="where a stream starts: content (default), reasoning (the template opened the tag), auto",
    )


def _think(args: argparse.Namespace, rules: ProviderRules) -> ThinkTags | None:
    return think_tags_for(rules, args.think_tags, args.think_start)


def _response(args: argparse.Namespace) -> int:
    rules = get_provider(args.provider)
    with open(args.request, "rb") as file:
        request_body = file.read()
    try:
        prepared = prepare_request(request_body, rules)
    except ApiError as error:
        sys.stdout.buffer.write(error.to_bytes() + b"\n")
        return 1
    body = sys.stdin.buffer.read()
    options = ResponseOptions(exclude=prepared.controls.exclude, think=_think(args, rules))
    mode: Mode = "sse" if body.lstrip()[:1] not in (b"{", b"[") else "json"
    rewriter = ResponseRewriter(options, mode)
    sys.stdout.buffer.write(rewriter.feed(body) + rewriter.finish())
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    body = sys.stdin.buffer.read()
    try:
        fragments = fragments_from_body(body)
    except ValueError as exc:
        sys.stderr.write(f"numi-mw rebuild: {exc}\n")
        return 1
    sys.stdout.buffer.write(encode(rebuild_reasoning_details(fragments)) + b"\n")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import httpx
    import uvicorn

    from numi_mw.proxy import create_app

    app = create_app(
        args.upstream,
        provider=args.provider,
        max_body_bytes=args.max_body_bytes,
        timeout=httpx.Timeout(args.timeout, connect=10.0),
        think_tags=args.think_tags,
        think_start=args.think_start,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


def _request(args: argparse.Namespace) -> int:
    body = sys.stdin.buffer.read()
    try:
        prepared = prepare_request(body, get_provider(args.provider))
    except ApiError as error:
        sys.stdout.buffer.write(error.to_bytes() + b"\n")
        return 1
    sys.stdout.buffer.write(prepared.body)
    if not prepared.body.endswith(b"\n"):
        sys.stdout.buffer.write(b"\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``numi-mw``; returns the process exit status (0 ok, 1 request rejected, 2 usage error)."""
    args = _parser().parse_args(argv)
    commands = {"serve": _serve, "request": _request, "response": _response, "rebuild": _rebuild}
    return commands[args.command](args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
