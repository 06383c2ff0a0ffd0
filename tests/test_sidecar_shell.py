"""The sidecar's shell in-process: it runs under any ASGI server's event loop (asyncio or trio), and what it keeps
per upstream URL is bounded whatever clients send."""

from __future__ import annotations

import json

import anyio
import httpx
import pytest

from numi_mw.proxy import create_app
from numi_mw.upstream import URL_CACHE, URL_CACHE_BYTES, _kept_url, target_url

ANSWER = {"id": "gen-1", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi", "reasoning": "R"}}]}


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_sidecar_app_answers_on_asyncio_and_on_trio(backend: str) -> None:
    pytest.importorskip(backend)
    seen: list[bytes] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        return httpx.Response(200, json=ANSWER)

    app = create_app("http://127.0.0.1:9/v1", provider="openrouter", transport=httpx.MockTransport(upstream))
    body = b'{"model":"m","reasoning_effort":"high","messages":[{"role":"user","content":"hi"}]}'

    async def main() -> tuple[int, bytes]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
                response = await client.post("/v1/chat/completions", content=body)
                return response.status_code, response.content

    status, answer = anyio.run(main, backend=backend)
    assert status == 200
    assert json.loads(answer)["choices"][0]["message"]["reasoning"] == "R"
    assert seen == [b'{"model":"m","reasoning":{"effort":"high"},"messages":[{"role":"user","content":"hi"}]}']


def test_only_short_paths_and_queries_have_their_upstream_url_kept() -> None:
    base = "http://127.0.0.1:9/v1"
    _kept_url.cache_clear()
    short = b"q=" + b"a" * (URL_CACHE_BYTES - len(b"/v1/models") - 2)
    assert str(target_url(base, b"/v1/models", short)) == "http://127.0.0.1:9/v1/models?" + short.decode()
    assert _kept_url.cache_info().currsize == 1
    long = short + b"a"  # one byte past the bound: built each time, never kept
    assert str(target_url(base, b"/v1/models", long)) == "http://127.0.0.1:9/v1/models?" + long.decode()
    assert _kept_url.cache_info().currsize == 1
    for i in range(URL_CACHE + 10):
        target_url(base, f"/v1/models/{i}".encode(), b"")
    assert _kept_url.cache_info().currsize == URL_CACHE
