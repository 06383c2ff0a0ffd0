"""The model catalog: providers, models, endpoints and their reasoning capabilities (spec 004 "Model capabilities").

The catalog is TOML text the caller hands in (the shell reads the file; ``numi_mw.catalog_files`` does that for
the packaged default and for a path). ``load_catalog`` decodes it with ``tomllib`` and ``msgspec.convert`` into
frozen Structs, then checks what a schema cannot (unique names, known providers, URLs). Every error is a
``CatalogError`` whose message names the file, the entry and the field::

    catalog.toml: models[1] (id "openai/gpt-6-luna"): endpoints[0].reasoning.mandatory: Expected `bool | null`,
    got `str`

The file uses the spec's own names; every capability field is optional, and keys the Structs do not declare are
ignored so that the format can grow. ``docs/catalog.md`` has an annotated example.

``models_listing`` and ``endpoints_listing`` render the catalog as the ``GET /models`` and
``GET /models/{author}/{slug}/endpoints`` bodies.
"""

from __future__ import annotations

import math
import re
import tomllib
from decimal import Decimal
from typing import Any, Literal, get_args
from urllib.parse import urlsplit

import msgspec

from numi_mw.core.providers import PROVIDERS, WireApi
from numi_mw.core.think import THINK_STARTS, ThinkStart

COMMON_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
"""The effort values spec 004 names ("reasoning": "Common values include none, minimal, low, medium, high, xhigh
and max; providers may accept others")."""

ReasoningMode = Literal["effort", "enabled", "native", "none"]
UnsupportedEffort = Literal["refuse", "nearest"]


class ReasoningCapabilities(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """An endpoint's published reasoning object (spec 004 "reasoning capabilities"); every field is optional.

    Attributes:
        supported_efforts: effort levels the endpoint accepts; ``None`` when not published.
        default_effort: effort used when the request sends none.
        default_enabled: whether the model reasons when the request sends no reasoning control.
        mandatory: ``True`` when reasoning cannot be turned off.
        supports_max_tokens: whether ``reasoning.max_tokens`` budgets are accepted.
    """

    supported_efforts: list[str] | None = None
    default_effort: str | None = None
    default_enabled: bool | None = None
    mandatory: bool | None = None
    supports_max_tokens: bool | None = None


class Pricing(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """An endpoint's token prices, in USD per token (as OpenRouter's ``GET /models`` lists them), each optional.

    Attributes:
        prompt: the price of a prompt token.
        completion: the price of a completion token.
        reasoning: the separate price of a reasoning token, when the endpoint has one (spec 004 "Output limits
            and billing": reasoning tokens then use it instead of the completion price); ``None``: the completion
            price.
        cache_read: the price of a prompt token read from the provider's cache
            (``prompt_tokens_details.cached_tokens``); ``None``: the prompt price.
    """

    prompt: float | None = None
    completion: float | None = None
    reasoning: float | None = None
    cache_read: float | None = None


class Endpoint(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """One offer of a model: a provider serving it with its own capabilities.

    Attributes:
        tag: the endpoint's tag, unique within its model (``example-provider/primary``).
        provider: the name of a catalog ``Provider``; requests routed here go to its base URL.
        supported_parameters: request parameters the endpoint declares; ``None`` when not published.
        reasoning: the published reasoning object, ``None`` when the endpoint publishes none.
        pricing: token prices, when known.
        model: the model name this endpoint's provider expects, when it differs from the catalog id (a direct
            provider's own name, e.g. ``gpt-5-mini`` for ``openai/gpt-5-mini``); ``None`` sends the catalog id.
    """

    tag: str
    provider: str
    supported_parameters: list[str] | None = None
    reasoning: ReasoningCapabilities | None = None
    pricing: Pricing | None = None
    model: str | None = None


class Model(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """A model and the endpoints that serve it.

    Attributes:
        id: the model id clients send (``author/slug``).
        reasoning_mode: how reasoning is requested (spec 000 "Reasoning Modes"): ``effort`` (named levels,
            normalized to the supported ones), ``enabled`` (on/off), ``native`` (as sent), ``none`` (no
            reasoning support).
        preserve_reasoning: replay stored reasoning on later turns (spec 000 "The Message Preparation Filter").
        unsupported_effort: what an effort no endpoint accepts gets, with ``reasoning_mode = "effort"``:
            ``refuse`` (spec 004 "Routing requirements": 400 ``invalid_request`` on ``reasoning.effort``) or
            ``nearest`` (spec 000 "Reasoning Modes": moved to the nearest level some endpoint accepts, then
            routed; ``routing.nearest_accepted_effort``).
        adaptive_thinking: on an Anthropic Messages route, the model thinks adaptively: an effort goes as
            ``thinking: {"type": "adaptive"}`` with ``output_config.effort`` rather than a token budget.
        think_start: where the model's answer starts for the think-tag splitter on routes that split tags
            (``ThinkTags.start``: ``content``, ``reasoning`` when its chat template opens the reasoning tag in the
            prompt so the model writes only the closing tag, ``auto``); ``None`` leaves it to the shell's
            default (``docs/streaming.md``, "Think tags"). An explicit ``--think-start`` wins over it.
        endpoints: the offers, in catalog order (the first is the representative one and the default route).
    """

    id: str
    reasoning_mode: ReasoningMode = "effort"
    preserve_reasoning: bool = False
    unsupported_effort: UnsupportedEffort = "refuse"
    adaptive_thinking: bool = False
    think_start: ThinkStart | None = None
    endpoints: list[Endpoint]


class Provider(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """An upstream: where requests for its endpoints go.

    Attributes:
        name: unique name; a known one (``numi_mw.core.providers.PROVIDERS``) selects that provider's rules.
        base_url: the upstream's API base URL (``http://`` or ``https://``).
        wire_api: the upstream's wire API.
        api_key_env: the name of the environment variable holding the API key (never the key itself).
        rules: the provider rules to apply (a name of ``PROVIDERS``: ``local`` for a vLLM or llama.cpp server,
            say); ``None`` uses ``name`` when it is a known provider, else ``generic``.
    """

    name: str
    base_url: str
    wire_api: WireApi = "openai-chat"
    api_key_env: str | None = None
    rules: str | None = None


class Catalog(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=False):
    """The whole catalog: providers and models, in file order."""

    providers: list[Provider]
    models: list[Model] = []

    def model(self, id: str) -> Model | None:
        """The model with this ``id``, or ``None``."""
        for model in self.models:
            if model.id == id:
                return model
        return None

    def provider(self, name: str) -> Provider | None:
        """The provider with this ``name``, or ``None``."""
        for provider in self.providers:
            if provider.name == name:
                return provider
        return None


class CatalogError(ValueError):
    """A catalog that cannot be used; the message names the file, the entry and the field.

    Attributes:
        source: the file name (or other label) the caller gave.
        entry: the entry at fault (``models[1] (id "openai/gpt-6-luna")``), or ``None``.
        field: the field path inside the entry (``endpoints[0].reasoning.mandatory``), or ``None``.
    """

    def __init__(self, source: str, entry: str | None, field: str | None, problem: str) -> None:
        self.source = source
        self.entry = entry
        self.field = field
        self.problem = problem
        parts = [p for p in (source, entry, field) if p]
        super().__init__(": ".join([*parts, problem]))


_PATH = re.compile(r"^(?P<problem>.*?)(?: - at `(?P<path>\$[^`]*)`)?$", re.DOTALL)
_ENTRY = re.compile(r"^\$\.(?P<section>providers|models)\[(?P<index>\d+)\]\.?(?P<rest>.*)$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]+)`$")
_TOML_AT = re.compile(r"\s*\(at line (?P<line>\d+), column (?P<column>\d+)\)$")
_TOML_END = re.compile(r"\s*\(at end of document\)$")
_KEY = {"providers": "name", "models": "id"}
_CHOICES: dict[str, tuple[str, ...]] = {
    "reasoning_mode": get_args(ReasoningMode),
    "unsupported_effort": get_args(UnsupportedEffort),
    "think_start": THINK_STARTS,
    "wire_api": get_args(WireApi),
}


def _entry_label(data: dict[str, Any], section: str, index: int) -> str:
    """``models[1] (id "x")``: the section, index and (when present) the entry's name or id."""
    key = _KEY[section]
    label = f"{section}[{index}]"
    entries = data.get(section)
    if isinstance(entries, list) and index < len(entries) and isinstance(entries[index], dict):
        value = entries[index].get(key)
        if isinstance(value, str):
            label += f' ({key} "{value}")'
    return label


def _validation_error(source: str, data: dict[str, Any], error: msgspec.ValidationError) -> CatalogError:
    """Turn msgspec's ``<problem> - at `$.models[1].endpoints[0].x``` into file, entry and field."""
    match = _PATH.match(str(error))
    assert match is not None  # the pattern matches any text
    problem, path = match["problem"], match["path"] or "$"
    missing = _MISSING.match(problem)
    if missing:
        path = f"{path}.{missing['name']}"
        problem = "missing required field"
    else:
        problem = problem.replace("`", "").replace(" | null", "")
        problem = problem[:1].lower() + problem[1:]
        choices = _CHOICES.get(path.rpartition(".")[2])
        if choices and problem.startswith("invalid enum value"):
            problem += "; use one of: " + ", ".join(choices)
    entry_match = _ENTRY.match(path)
    if entry_match:
        section, index = entry_match["section"], int(entry_match["index"])
        return CatalogError(source, _entry_label(data, section, index), entry_match["rest"] or None, problem)
    field = path.removeprefix("$").removeprefix(".") or None
    return CatalogError(source, None, field, problem)


def _parse_toml(text: str | bytes, source: str) -> dict[str, Any]:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CatalogError(source, None, None, f"not UTF-8 text (byte {exc.start})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _TOML_AT.search(message)
        end = _TOML_END.search(message)
        if at:
            message = f"line {at['line']}, column {at['column']}: TOML syntax error: {message[: at.start()]}"
        elif end:
            message = f"end of file: TOML syntax error: {message[: end.start()]}"
        else:
            message = f"TOML syntax error: {message}"
        raise CatalogError(source, None, None, message) from None


BaseUrlProblem = Literal["scheme", "host", "port", "syntax"]


def base_url_problem(url: str) -> BaseUrlProblem | None:
    """What keeps ``url`` from being an upstream's base URL, or ``None``: ``scheme`` (not ``http://`` or
    ``https://``), ``host`` (none), ``port`` (not a number from 1 to 65535, RFC 3986 section 3.2.3 and the TCP
    port range), ``syntax`` (``urllib.parse.urlsplit`` cannot split it, as with an unclosed ``[`` of an IPv6
    address; a URL holding a space or a control character, which ``urlsplit`` would strip or keep, is no URL either,
    RFC 3986 section 2). The one rule for ``--upstream`` and a catalog provider's ``base_url``."""
    if any(char <= " " or char == "\x7f" for char in url):
        return "syntax"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "syntax"
    if parts.scheme not in ("http", "https"):
        return "scheme"
    try:
        port = parts.port
    except ValueError:  # out of range, or not a number
        return "port"
    if not parts.hostname:
        return "host"
    if port == 0:
        return "port"
    return None


_BASE_URL_PROBLEMS: dict[BaseUrlProblem, str] = {
    "scheme": "must start with http:// or https://",
    "host": "has no host",
    "port": "has a port that is not a number from 1 to 65535",
    "syntax": "is not a URL",
}


def load_catalog(text: str | bytes, source: str) -> Catalog:
    """Decode and check a catalog (spec 004 "Model capabilities"; the file format is ``docs/catalog.md``).

    Args:
        text: the TOML document (``str``, or ``bytes`` in UTF-8) the caller has read.
        source: the file name used in error messages.

    Returns:
        The ``Catalog``.

    Raises:
        ValueError: ``source`` is not a ``str``.
        CatalogError: ``text`` is not a ``str`` or ``bytes``; the text is not UTF-8 or not TOML (the message
            names the line and column); a field has the wrong type or value or a required field is missing (the
            message names the entry and the field path); or the catalog is inconsistent: a provider name or model
            id appears twice, an endpoint names a provider the catalog lacks, a ``base_url`` does not start with
            ``http://`` or ``https://``, has no host or a port that is not a number from 1 to 65535
            (``base_url_problem``), a model lists no endpoints, a model lists an endpoint tag twice, or a price
            is negative or not finite.
    """
    if not isinstance(source, str):
        raise ValueError(f"source must be the file name (a str), not {source!r}")
    if not isinstance(text, str | bytes):
        raise CatalogError(source, None, None, f"a catalog is TOML text (str or bytes), not {type(text).__name__}")
    data = _parse_toml(text, source)
    try:
        catalog = msgspec.convert(data, Catalog)
    except msgspec.ValidationError as exc:
        raise _validation_error(source, data, exc) from None
    _check(catalog, source)
    return catalog


def _check(catalog: Catalog, source: str) -> None:
    if not catalog.providers:
        raise CatalogError(source, None, "providers", "a catalog needs at least one provider")
    seen_providers: dict[str, int] = {}
    for i, provider in enumerate(catalog.providers):
        entry = f'providers[{i}] (name "{provider.name}")'
        if provider.name in seen_providers:
            first = seen_providers[provider.name]
            raise CatalogError(
                source, entry, "name", f"duplicate provider name (also providers[{first}]); give each a unique name"
            )
        seen_providers[provider.name] = i
        problem = base_url_problem(provider.base_url)
        if problem is not None:
            raise CatalogError(source, entry, "base_url", f'"{provider.base_url}" {_BASE_URL_PROBLEMS[problem]}')
        if provider.rules is not None and provider.rules not in PROVIDERS:
            raise CatalogError(
                source, entry, "rules", f'unknown rules "{provider.rules}"; use one of: {", ".join(PROVIDERS)}'
            )
    known = ", ".join(seen_providers) or "(none)"
    seen_models: dict[str, int] = {}
    for i, model in enumerate(catalog.models):
        entry = f'models[{i}] (id "{model.id}")'
        if model.id in seen_models:
            first = seen_models[model.id]
            raise CatalogError(source, entry, "id", f"duplicate model id (also models[{first}]); give each a unique id")
        seen_models[model.id] = i
        if not model.endpoints:
            raise CatalogError(source, entry, "endpoints", "a model needs at least one endpoint")
        seen_tags: dict[str, int] = {}
        for j, endpoint in enumerate(model.endpoints):
            if endpoint.tag in seen_tags:
                raise CatalogError(
                    source,
                    entry,
                    f"endpoints[{j}].tag",
                    f'duplicate endpoint tag "{endpoint.tag}" (also endpoints[{seen_tags[endpoint.tag]}])',
                )
            seen_tags[endpoint.tag] = j
            if endpoint.provider not in seen_providers:
                raise CatalogError(
                    source,
                    entry,
                    f"endpoints[{j}].provider",
                    f'unknown provider "{endpoint.provider}"; use one of: {known}',
                )
            for name in Pricing.__struct_fields__:
                price = getattr(endpoint.pricing, name) if endpoint.pricing is not None else None
                if price is not None and not (math.isfinite(price) and price >= 0):
                    raise CatalogError(
                        source,
                        entry,
                        f"endpoints[{j}].pricing.{name}",
                        f"{price!r} is not a price; give USD per token as a number >= 0",
                    )


def published_reasoning(reasoning: ReasoningCapabilities) -> dict[str, Any]:
    """The reasoning object as published: only the fields the catalog sets (spec 004 "Model capabilities").

    Returns:
        ``{"supported_efforts": [...], "default_effort": ..., ...}`` without the ``None`` fields, in the
        spec's field order.
    """
    out: dict[str, Any] = {}
    for name in ReasoningCapabilities.__struct_fields__:
        value = getattr(reasoning, name)
        if value is not None:
            out[name] = list(value) if isinstance(value, list) else value
    return out


def _price(value: float) -> str:
    """A per-token price as a plain decimal string, as OpenRouter writes it (``"0.00000125"``)."""
    return format(Decimal(repr(value)), "f")


_PRICE_KEYS = (
    ("prompt", "prompt"),
    ("completion", "completion"),
    ("reasoning", "internal_reasoning"),
    ("cache_read", "input_cache_read"),
)
"""Each ``Pricing`` field and the key OpenRouter's listings give it."""


def _pricing(pricing: Pricing) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, key in _PRICE_KEYS:
        value = getattr(pricing, name)
        if value is not None:
            out[key] = _price(value)
    return out


def _owner(model: Model) -> str:
    author, sep, _ = model.id.partition("/")
    return author if sep else model.endpoints[0].provider if model.endpoints else model.id


def _takes_reasoning(endpoint: Endpoint) -> bool:
    """Whether the listings show ``endpoint``'s reasoning object: spec 004 "Model capabilities" lists it "for
    offers that support the reasoning parameter", so not when ``supported_parameters`` is published without
    ``reasoning`` (an endpoint that does not publish its parameters is not excluded: missing facts never are)."""
    return endpoint.supported_parameters is None or "reasoning" in endpoint.supported_parameters


def models_listing(catalog: Catalog) -> dict[str, Any]:
    """The ``GET /models`` body (spec 004 "Model capabilities": a model row describes one representative offer).

    The representative offer is the model's first endpoint (catalog order, also the default route)::

        {"object": "list", "data": [{"id": "openai/gpt-5-mini", "object": "model", "owned_by": "openai",
                                     "supported_parameters": [...], "reasoning": {...}}]}

    ``owned_by`` is the author part of the id (before ``/``; the first endpoint's provider for an id without
    one). ``supported_parameters`` is omitted when the endpoint does not publish it. ``reasoning`` holds only the
    published (non-``None``) fields and is omitted when the endpoint has no reasoning object or publishes
    ``supported_parameters`` without ``reasoning``.
    """
    rows: list[dict[str, Any]] = []
    for model in catalog.models:
        row: dict[str, Any] = {"id": model.id, "object": "model", "owned_by": _owner(model)}
        if model.endpoints:
            first = model.endpoints[0]
            if first.supported_parameters is not None:
                row["supported_parameters"] = list(first.supported_parameters)
            if first.reasoning is not None and _takes_reasoning(first):
                row["reasoning"] = published_reasoning(first.reasoning)
        rows.append(row)
    return {"object": "list", "data": rows}


def endpoints_listing(model: Model) -> dict[str, Any]:
    """The ``GET /models/{author}/{slug}/endpoints`` body (spec 004 "Model capabilities", "Endpoint excerpt").

    Loosely OpenRouter's shape for the same path: ``{"data": {"id": ..., "endpoints": [...]}}`` with one entry
    per endpoint in catalog order::

        {"tag": "example-provider/primary", "provider": "openrouter",
         "supported_parameters": [...], "reasoning": {...}, "pricing": {...}}

    ``supported_parameters`` and ``reasoning`` (published fields only) are omitted when not published;
    ``reasoning`` also when ``supported_parameters`` is published without ``reasoning``.
    ``pricing`` (only when the catalog gives prices) follows OpenRouter: USD per token as decimal strings,
    with the reasoning price under ``internal_reasoning`` and the cache read price under ``input_cache_read``.
    OpenRouter's other fields (context length, status, uptime) are not catalog facts and are left out.
    """
    endpoints: list[dict[str, Any]] = []
    for endpoint in model.endpoints:
        row: dict[str, Any] = {"tag": endpoint.tag, "provider": endpoint.provider}
        if endpoint.supported_parameters is not None:
            row["supported_parameters"] = list(endpoint.supported_parameters)
        if endpoint.reasoning is not None and _takes_reasoning(endpoint):
            row["reasoning"] = published_reasoning(endpoint.reasoning)
        if endpoint.pricing is not None:
            prices = _pricing(endpoint.pricing)
            if prices:
                row["pricing"] = prices
        endpoints.append(row)
    return {"data": {"id": model.id, "endpoints": endpoints}}


def _field_names(struct: type[msgspec.Struct]) -> frozenset[str]:
    return frozenset(field.encode_name for field in msgspec.structs.fields(struct))


def unknown_keys(text: str | bytes, source: str) -> list[str]:
    """Keys of a catalog file that no catalog field reads (often typos such as ``suported_parameters``).

    They are allowed (more keys may be added) and ignored; ``numi-mw catalog check`` reports them as warnings.

    Returns:
        One line per unknown key, e.g. ``models[0].endpoints[1]: unknown key "suported_parameters"``.

    Raises:
        CatalogError: the file is not valid TOML.
    """
    data = _parse_toml(text, source)
    found: list[str] = []

    def check(value: Any, struct: type[msgspec.Struct], path: str) -> None:
        if not isinstance(value, dict):
            return
        for key in value:
            if key not in _field_names(struct):
                hint = (
                    "; keep keys out of the catalog: name an environment variable with api_key_env"
                    if key == "api_key"
                    else ""
                )
                found.append(f'{path or "(top level)"}: unknown key "{key}"{hint}')

    check(data, Catalog, "")
    for i, provider in enumerate(data.get("providers") or []):
        check(provider, Provider, f"providers[{i}]")
    for i, model in enumerate(data.get("models") or []):
        check(model, Model, f"models[{i}]")
        for j, endpoint in enumerate(model.get("endpoints") or [] if isinstance(model, dict) else []):
            path = f"models[{i}].endpoints[{j}]"
            check(endpoint, Endpoint, path)
            if isinstance(endpoint, dict):
                check(endpoint.get("reasoning"), ReasoningCapabilities, f"{path}.reasoning")
                check(endpoint.get("pricing"), Pricing, f"{path}.pricing")
    return found


def unknown_efforts(catalog: Catalog) -> list[str]:
    """Effort names in a catalog's ``supported_efforts`` and ``default_effort`` outside spec 004's list
    (``COMMON_EFFORTS``), often typos such as ``hgih``.

    They are allowed (spec 004: "providers may accept others") and used as written, so a misspelled level makes
    requests for the real one skip that endpoint; ``numi-mw catalog check`` and ``numi-mw serve`` report them as
    warnings.

    Returns:
        One line per such name, e.g. ``models[0] (id "m"): endpoints[0].reasoning.supported_efforts[2]: effort
        "hgih" is not one of none, minimal, low, medium, high, xhigh, max; requests name the effort exactly``.
    """
    found: list[str] = []
    known = ", ".join(COMMON_EFFORTS)
    for i, model in enumerate(catalog.models):
        for j, endpoint in enumerate(model.endpoints):
            reasoning = endpoint.reasoning
            if reasoning is None:
                continue
            named = [(f"supported_efforts[{k}]", e) for k, e in enumerate(reasoning.supported_efforts or [])]
            if reasoning.default_effort is not None:
                named.append(("default_effort", reasoning.default_effort))
            for field, effort in named:
                if effort not in COMMON_EFFORTS:
                    found.append(
                        f'models[{i}] (id "{model.id}"): endpoints[{j}].reasoning.{field}: effort "{effort}" is '
                        f"not one of {known}; requests name the effort exactly"
                    )
    return found
