"""``provider.max_price`` narrows routing (spec 004 "Output limits and billing": "a provider.max_price.completion
ceiling also applies to" a separate reasoning price), in USD per million tokens as OpenRouter reads it, with spec
004's errors ("Routing requirements") when nothing is left; and the chosen endpoint's prices reach the route."""

from __future__ import annotations

import json
from typing import Any

import pytest

from numi_mw.core.catalog import CatalogError, Pricing, endpoints_listing, load_catalog
from numi_mw.core.errors import ApiError
from numi_mw.core.request import PreparedRequest, prepare_request

CATALOG = load_catalog(
    """
[[providers]]
name = "openrouter"
base_url = "https://openrouter.ai/api/v1"

[[models]]
id = "vendor/thinker"

[[models.endpoints]]
tag = "cheap"
provider = "openrouter"
reasoning = { supported_efforts = ["low", "high"] }
pricing = { prompt = 0.000001, completion = 0.000004, reasoning = 0.000008 }

[[models.endpoints]]
tag = "dear"
provider = "openrouter"
reasoning = { supported_efforts = ["low", "medium", "high"] }
pricing = { prompt = 0.000003, completion = 0.000015 }

[[models.endpoints]]
tag = "unpriced"
provider = "openrouter"
reasoning = { supported_efforts = ["low"] }
""",
    "catalog.toml",
)


def prepare(provider: dict[str, Any], **fields: Any) -> PreparedRequest:
    body = {"model": "vendor/thinker", "messages": [], "provider": provider, **fields}
    return prepare_request(json.dumps(body).encode(), CATALOG)


def refused(provider: dict[str, Any], **fields: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        prepare(provider, **fields)
    return info.value


@pytest.mark.parametrize(
    ("max_price", "eligible"),
    [
        ({"prompt": 1, "completion": 8}, ["cheap", "unpriced"]),
        ({"prompt": "3", "completion": "15"}, ["cheap", "dear", "unpriced"]),
        ({"prompt": 0.999}, ["unpriced"]),
        # the completion ceiling caps the separate reasoning price (8 per million) too
        ({"completion": 7.5}, ["unpriced"]),
        ({"completion": 15}, ["cheap", "dear", "unpriced"]),
        ({"prompt": None, "completion": None, "request": 0.01}, ["cheap", "dear", "unpriced"]),
    ],
)
def test_max_price_keeps_the_endpoints_within_it(max_price: dict[str, Any], eligible: list[str]) -> None:
    prepared = prepare({"max_price": max_price})
    assert list(prepared.route.eligible) == eligible
    assert json.loads(prepared.body)["provider"] == {"max_price": max_price}  # OpenRouter reads it too


def test_the_route_carries_the_chosen_endpoints_prices() -> None:
    assert prepare({}).route.pricing == Pricing(prompt=0.000001, completion=0.000004, reasoning=0.000008)
    assert prepare({"max_price": {"prompt": 0.5}}).route.pricing is None  # "unpriced" serves


def test_strict_matching_leaves_out_an_endpoint_without_the_price_and_nothing_left_is_503() -> None:
    prepared = prepare({"max_price": {"completion": 16}, "require_parameters": True})
    assert list(prepared.route.eligible) == ["cheap", "dear"]
    error = refused({"max_price": {"completion": 7}, "require_parameters": True})
    assert error.status == 503
    assert error.body() == {
        "error": {
            "message": 'No endpoint of model "vendor/thinker" is within provider.max_price '
            '(endpoint "cheap" needs a reasoning price of at most 7 USD per million tokens (it has 8); '
            'endpoint "dear" needs a completion price of at most 7 USD per million tokens (it has 15); '
            'endpoint "unpriced" needs a published completion price (provider.require_parameters with '
            "provider.max_price)); raise or remove provider.max_price.",
            "type": "api_error",
            "code": "provider_unavailable",
            "param": None,
        }
    }


def test_nothing_within_the_price_and_the_effort_is_503_naming_both() -> None:
    error = refused({"max_price": {"prompt": 0.5}}, reasoning={"effort": "high"})
    assert error.status == 503
    assert error.body()["error"]["message"] == (
        'No endpoint of model "vendor/thinker" declares the requested reasoning controls within provider.max_price '
        '(endpoint "cheap" needs a prompt price of at most 0.5 USD per million tokens (it has 1); '
        'endpoint "dear" needs a prompt price of at most 0.5 USD per million tokens (it has 3); '
        'endpoint "unpriced" needs effort "high" in supported_efforts); remove those controls, set '
        "provider.require_parameters to false, or raise provider.max_price."
    )


def test_an_effort_no_endpoint_accepts_is_still_the_400() -> None:
    error = refused({"max_price": {"prompt": 0.5}}, reasoning={"effort": "xhigh"})
    assert (error.status, error.code, error.param) == (400, "invalid_request", "reasoning.effort")


@pytest.mark.parametrize(
    ("max_price", "param", "shown"),
    [
        (5, "provider.max_price", "5"),
        ({"prompt": -1}, "provider.max_price.prompt", "-1"),
        ({"completion": "cheap"}, "provider.max_price.completion", '"cheap"'),
        ({"completion": True}, "provider.max_price.completion", "True"),
        ({"prompt": "NaN"}, "provider.max_price.prompt", '"NaN"'),
    ],
)
def test_a_max_price_that_is_no_price_is_400(max_price: Any, param: str, shown: str) -> None:
    error = refused({"max_price": max_price})
    assert (error.status, error.code, error.param) == (400, "invalid_request", param)
    if param == "provider.max_price":
        expected = (
            'provider.max_price must be an object of USD prices per million tokens, such as {"prompt": 1, '
            f'"completion": 4}}, not {shown}.'
        )
    else:
        expected = (
            f"{param} must be a non-negative number of USD per million tokens (or that number as a string), "
            f"not {shown}."
        )
    assert error.body()["error"]["message"] == expected


def test_the_endpoints_listing_gives_every_price_under_openrouters_names() -> None:
    catalog = load_catalog(
        """
[[providers]]
name = "xai"
base_url = "https://api.x.ai/v1"

[[models]]
id = "x-ai/grok-3-mini"

[[models.endpoints]]
tag = "xai"
provider = "xai"
pricing = { prompt = 0.0000003, completion = 0.0000005, reasoning = 0.0000005, cache_read = 0.000000075 }
""",
        "catalog.toml",
    )

    model = catalog.model("x-ai/grok-3-mini")
    assert model is not None
    assert endpoints_listing(model)["data"]["endpoints"][0]["pricing"] == {
        "prompt": "0.0000003",
        "completion": "0.0000005",
        "internal_reasoning": "0.0000005",
        "input_cache_read": "0.000000075",
    }


@pytest.mark.parametrize(("value", "shown"), [("-0.000001", "-1e-06"), ("inf", "inf"), ("nan", "nan")])
def test_a_catalog_price_that_is_no_price_is_refused_at_load(value: str, shown: str) -> None:
    text = f"""
[[providers]]
name = "openrouter"
base_url = "https://openrouter.ai/api/v1"

[[models]]
id = "vendor/m"

[[models.endpoints]]
tag = "a"
provider = "openrouter"
pricing = {{ prompt = 0.000001, completion = {value} }}
"""
    with pytest.raises(CatalogError) as info:
        load_catalog(text, "catalog.toml")
    assert str(info.value) == (
        f'catalog.toml: models[0] (id "vendor/m"): endpoints[0].pricing.completion: {shown} is not a price; '
        "give USD per token as a number >= 0"
    )
