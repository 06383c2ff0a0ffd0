"""The model catalog (its file format, spec 004 "Model capabilities", spec 000 "Reasoning Modes")."""

from __future__ import annotations

from pathlib import Path

import pytest

from numi_mw.catalog_files import default_catalog, read_catalog
from numi_mw.core.catalog import (
    Catalog,
    CatalogError,
    Endpoint,
    Model,
    Pricing,
    Provider,
    ReasoningCapabilities,
    endpoints_listing,
    load_catalog,
    models_listing,
)

CONTRACT = """
[[providers]]
name = "openrouter"                 # a known name selects that provider's rules; others get generic rules
base_url = "https://openrouter.ai/api/v1"
wire_api = "openai-chat"            # openai-chat | openai-responses | anthropic-messages
api_key_env = "OPENROUTER_API_KEY"  # optional

[[models]]
id = "openai/gpt-6-luna"
reasoning_mode = "effort"
preserve_reasoning = true

[[models.endpoints]]
tag = "example-provider/primary"
provider = "openrouter"
supported_parameters = ["max_tokens", "reasoning", "include_reasoning", "tools"]
reasoning = { supported_efforts = ["low", "medium", "high"], default_effort = "medium", default_enabled = true, mandatory = false, supports_max_tokens = true }
"""

LUNA_ENDPOINT = Endpoint(
    tag="example-provider/primary",
    provider="openrouter",
    supported_parameters=["max_tokens", "reasoning", "include_reasoning", "tools"],
    reasoning=ReasoningCapabilities(
        supported_efforts=["low", "medium", "high"],
        default_effort="medium",
        default_enabled=True,
        mandatory=False,
        supports_max_tokens=True,
    ),
)

# Two providers and two models; the second model is the one the error cases break.
BASE = """
[[providers]]
name = "openrouter"
base_url = "https://openrouter.ai/api/v1"

[[providers]]
name = "local"
base_url = "http://127.0.0.1:8080/v1"

[[models]]
id = "deepseek/deepseek-r1"

[[models.endpoints]]
tag = "deepseek"
provider = "openrouter"

[[models]]
id = "openai/gpt-6-luna"

[[models.endpoints]]
tag = "example-provider/primary"
provider = "openrouter"
"""


def test_contract_example_decodes_into_the_structs() -> None:
    catalog = load_catalog(CONTRACT, "catalog.toml")
    assert catalog == Catalog(
        providers=[
            Provider(
                name="openrouter",
                base_url="https://openrouter.ai/api/v1",
                wire_api="openai-chat",
                api_key_env="OPENROUTER_API_KEY",
            )
        ],
        models=[
            Model(id="openai/gpt-6-luna", reasoning_mode="effort", preserve_reasoning=True, endpoints=[LUNA_ENDPOINT])
        ],
    )


def test_bytes_are_accepted_as_utf8() -> None:
    assert load_catalog(CONTRACT.encode(), "catalog.toml") == load_catalog(CONTRACT, "catalog.toml")


def test_defaults_for_optional_fields() -> None:
    catalog = load_catalog(BASE, "catalog.toml")
    assert catalog.providers[1] == Provider(name="local", base_url="http://127.0.0.1:8080/v1")
    assert catalog.providers[1].wire_api == "openai-chat"
    assert catalog.providers[1].api_key_env is None
    model = catalog.models[0]
    assert (model.reasoning_mode, model.preserve_reasoning) == ("effort", False)
    assert model.endpoints == [Endpoint(tag="deepseek", provider="openrouter")]
    assert model.endpoints[0].supported_parameters is None
    assert model.endpoints[0].reasoning is None
    assert model.endpoints[0].pricing is None


def test_unsupported_effort_defaults_to_refuse_and_reads_nearest() -> None:
    # refuse is spec 004's 400 ("Routing requirements"); nearest is spec 000's "normalized to the model's
    # supported levels" (tests/test_routing.py routes both end to end)
    catalog = load_catalog(BASE, "catalog.toml")
    assert [m.unsupported_effort for m in catalog.models] == ["refuse", "refuse"]
    text = BASE.replace('id = "openai/gpt-6-luna"', 'id = "openai/gpt-6-luna"\nunsupported_effort = "nearest"')
    assert load_catalog(text, "catalog.toml").models[1].unsupported_effort == "nearest"


def test_every_capability_field_is_optional() -> None:
    text = BASE.replace('tag = "deepseek"', 'tag = "deepseek"\nreasoning = {}')
    assert load_catalog(text, "c.toml").models[0].endpoints[0].reasoning == ReasoningCapabilities()


def test_unknown_keys_are_ignored_so_the_format_can_grow() -> None:
    text = CONTRACT.replace('tag = "example-provider/primary"', 'tag = "example-provider/primary"\ncontext = 128000')
    text = text.replace('api_key_env = "OPENROUTER_API_KEY"', 'api_key_env = "OPENROUTER_API_KEY"\nregion = "eu"')
    text = text.replace("supports_max_tokens = true }", "supports_max_tokens = true, summaries = true }")
    assert load_catalog(text, "catalog.toml") == load_catalog(CONTRACT, "catalog.toml")


def test_pricing_accepts_integers_and_floats() -> None:
    text = BASE.replace(
        'tag = "deepseek"', 'tag = "deepseek"\npricing = { prompt = 0, completion = 2e-6, reasoning = 0.000003 }'
    )
    pricing = load_catalog(text, "c.toml").models[0].endpoints[0].pricing
    assert pricing == Pricing(prompt=0.0, completion=2e-6, reasoning=3e-6)


def test_lookup_by_model_id_and_provider_name() -> None:
    catalog = load_catalog(BASE, "catalog.toml")
    assert catalog.model("openai/gpt-6-luna") is catalog.models[1]
    assert catalog.model("openai/none") is None
    assert catalog.provider("local") is catalog.providers[1]
    assert catalog.provider("anthropic") is None


def test_structs_are_frozen() -> None:
    catalog = load_catalog(BASE, "catalog.toml")
    with pytest.raises(AttributeError):
        catalog.models[0].id = "x"  # type: ignore[misc]


# Each row: (what is broken, the catalog text, the exact message, entry, field).
ERRORS: list[tuple[str, str, str, str | None, str | None]] = [
    (
        "wrong type deep inside an endpoint",
        BASE + 'reasoning = { mandatory = "yes" }\n',
        'catalog.toml: models[1] (id "openai/gpt-6-luna"): endpoints[0].reasoning.mandatory: expected bool, got str',
        'models[1] (id "openai/gpt-6-luna")',
        "endpoints[0].reasoning.mandatory",
    ),
    (
        "wrong element type in a list",
        BASE + "supported_parameters = [1]\n",
        'catalog.toml: models[1] (id "openai/gpt-6-luna"): endpoints[0].supported_parameters[0]: expected str, got int',
        'models[1] (id "openai/gpt-6-luna")',
        "endpoints[0].supported_parameters[0]",
    ),
    (
        "price that is not a number",
        BASE + 'pricing = { prompt = "cheap" }\n',
        'catalog.toml: models[1] (id "openai/gpt-6-luna"): endpoints[0].pricing.prompt: expected float, got str',
        'models[1] (id "openai/gpt-6-luna")',
        "endpoints[0].pricing.prompt",
    ),
    (
        "missing endpoint tag",
        BASE + '[[models.endpoints]]\nprovider = "local"\n',
        'catalog.toml: models[1] (id "openai/gpt-6-luna"): endpoints[1].tag: missing required field',
        'models[1] (id "openai/gpt-6-luna")',
        "endpoints[1].tag",
    ),
    (
        "missing model id",
        BASE + '[[models]]\n[[models.endpoints]]\ntag = "t"\nprovider = "local"\n',
        "catalog.toml: models[2]: id: missing required field",
        "models[2]",
        "id",
    ),
    (
        "missing endpoints",
        BASE + '[[models]]\nid = "z-ai/glm-4.6"\n',
        'catalog.toml: models[2] (id "z-ai/glm-4.6"): endpoints: missing required field',
        'models[2] (id "z-ai/glm-4.6")',
        "endpoints",
    ),
    (
        "unknown reasoning mode",
        BASE.replace('id = "openai/gpt-6-luna"', 'id = "openai/gpt-6-luna"\nreasoning_mode = "fast"'),
        "catalog.toml: models[1] (id \"openai/gpt-6-luna\"): reasoning_mode: invalid enum value 'fast'; "
        "use one of: effort, enabled, native, none",
        'models[1] (id "openai/gpt-6-luna")',
        "reasoning_mode",
    ),
    (
        "unknown unsupported_effort choice",
        BASE.replace('id = "openai/gpt-6-luna"', 'id = "openai/gpt-6-luna"\nunsupported_effort = "closest"'),
        "catalog.toml: models[1] (id \"openai/gpt-6-luna\"): unsupported_effort: invalid enum value 'closest'; "
        "use one of: refuse, nearest",
        'models[1] (id "openai/gpt-6-luna")',
        "unsupported_effort",
    ),
    (
        "unsupported_effort of the wrong type",
        BASE.replace('id = "openai/gpt-6-luna"', 'id = "openai/gpt-6-luna"\nunsupported_effort = true'),
        'catalog.toml: models[1] (id "openai/gpt-6-luna"): unsupported_effort: expected str, got bool',
        'models[1] (id "openai/gpt-6-luna")',
        "unsupported_effort",
    ),
    (
        "unknown wire API",
        BASE.replace('name = "local"', 'name = "local"\nwire_api = "grpc"'),
        "catalog.toml: providers[1] (name \"local\"): wire_api: invalid enum value 'grpc'; "
        "use one of: openai-chat, openai-responses, anthropic-messages",
        'providers[1] (name "local")',
        "wire_api",
    ),
    (
        "missing base URL",
        BASE + '[[providers]]\nname = "anthropic"\n',
        'catalog.toml: providers[2] (name "anthropic"): base_url: missing required field',
        'providers[2] (name "anthropic")',
        "base_url",
    ),
    (
        "missing providers table",
        '[[models]]\nid = "m"\nendpoints = []\n',
        "catalog.toml: providers: missing required field",
        None,
        "providers",
    ),
    (
        "providers of the wrong type",
        "providers = 5\nmodels = []\n",
        "catalog.toml: providers: expected array, got int",
        None,
        "providers",
    ),
    (
        "duplicate provider name",
        BASE + '[[providers]]\nname = "openrouter"\nbase_url = "https://example.com/v1"\n',
        'catalog.toml: providers[2] (name "openrouter"): name: duplicate provider name (also providers[0]); '
        "give each a unique name",
        'providers[2] (name "openrouter")',
        "name",
    ),
    (
        "duplicate model id",
        BASE + '[[models]]\nid = "deepseek/deepseek-r1"\n[[models.endpoints]]\ntag = "t"\nprovider = "local"\n',
        'catalog.toml: models[2] (id "deepseek/deepseek-r1"): id: duplicate model id (also models[0]); '
        "give each a unique id",
        'models[2] (id "deepseek/deepseek-r1")',
        "id",
    ),
    (
        "endpoint names an unknown provider",
        BASE + '[[models.endpoints]]\ntag = "anthropic"\nprovider = "anthropic"\n',
        'catalog.toml: models[1] (id "openai/gpt-6-luna"): endpoints[1].provider: unknown provider "anthropic"; '
        "use one of: openrouter, local",
        'models[1] (id "openai/gpt-6-luna")',
        "endpoints[1].provider",
    ),
    (
        "base URL with a port out of range",
        BASE.replace("http://127.0.0.1:8080/v1", "http://127.0.0.1:99999/v1"),
        'catalog.toml: providers[1] (name "local"): base_url: "http://127.0.0.1:99999/v1" has a port that is not '
        "a number from 1 to 65535",
        'providers[1] (name "local")',
        "base_url",
    ),
    (
        "base URL with a port that is no number",
        BASE.replace("http://127.0.0.1:8080/v1", "http://127.0.0.1:abc/v1"),
        'catalog.toml: providers[1] (name "local"): base_url: "http://127.0.0.1:abc/v1" has a port that is not '
        "a number from 1 to 65535",
        'providers[1] (name "local")',
        "base_url",
    ),
    (
        "base URL without a host",
        BASE.replace("http://127.0.0.1:8080/v1", "http:///v1"),
        'catalog.toml: providers[1] (name "local"): base_url: "http:///v1" has no host',
        'providers[1] (name "local")',
        "base_url",
    ),
    (
        "base URL that is not a URL",
        BASE.replace("http://127.0.0.1:8080/v1", "http://[::1/v1"),
        'catalog.toml: providers[1] (name "local"): base_url: "http://[::1/v1" is not a URL',
        'providers[1] (name "local")',
        "base_url",
    ),
    (
        "base URL without http(s)",
        BASE.replace("http://127.0.0.1:8080/v1", "127.0.0.1:8080/v1"),
        'catalog.toml: providers[1] (name "local"): base_url: "127.0.0.1:8080/v1" must start with http:// or https://',
        'providers[1] (name "local")',
        "base_url",
    ),
    (
        "model without endpoints",
        BASE + '[[models]]\nid = "z-ai/glm-4.6"\nendpoints = []\n',
        'catalog.toml: models[2] (id "z-ai/glm-4.6"): endpoints: a model needs at least one endpoint',
        'models[2] (id "z-ai/glm-4.6")',
        "endpoints",
    ),
    (
        "duplicate endpoint tag",
        BASE + '[[models.endpoints]]\ntag = "example-provider/primary"\nprovider = "local"\n',
        'catalog.toml: models[1] (id "openai/gpt-6-luna"): endpoints[1].tag: duplicate endpoint tag '
        '"example-provider/primary" (also endpoints[0])',
        'models[1] (id "openai/gpt-6-luna")',
        "endpoints[1].tag",
    ),
    (
        "TOML syntax error",
        BASE + "supported_parameters = [\n",
        "catalog.toml: end of file: TOML syntax error: Invalid value",
        None,
        None,
    ),
    (
        "TOML syntax error on a line",
        BASE.replace('tag = "deepseek"', "tag = deepseek"),
        "catalog.toml: line 14, column 7: TOML syntax error: Invalid value",
        None,
        None,
    ),
]


@pytest.mark.parametrize(("text", "message", "entry", "field"), [row[1:] for row in ERRORS], ids=[r[0] for r in ERRORS])
def test_errors_name_file_entry_and_field(text: str, message: str, entry: str | None, field: str | None) -> None:
    with pytest.raises(CatalogError) as caught:
        load_catalog(text, "catalog.toml")
    assert str(caught.value) == message
    assert (caught.value.source, caught.value.entry, caught.value.field) == ("catalog.toml", entry, field)
    assert isinstance(caught.value, ValueError)


def test_bytes_that_are_not_utf8() -> None:
    with pytest.raises(CatalogError) as caught:
        load_catalog(b"name = \xff", "bad.toml")
    assert str(caught.value) == "bad.toml: not UTF-8 text (byte 7)"


def test_packaged_default_catalog_uses_the_spec_000_combination() -> None:
    catalog = default_catalog()
    assert catalog.providers == [
        Provider(
            name="openrouter",
            base_url="https://openrouter.ai/api/v1",
            wire_api="openai-chat",
            api_key_env="OPENROUTER_API_KEY",
        ),
        # the direct providers speak their own wire APIs, which numi_mw translates
        Provider(
            name="anthropic",
            base_url="https://api.anthropic.com/v1",
            wire_api="anthropic-messages",
            api_key_env="ANTHROPIC_API_KEY",
        ),
        Provider(
            name="openai",
            base_url="https://api.openai.com/v1",
            wire_api="openai-responses",
            api_key_env="OPENAI_API_KEY",
        ),
        # a local server for open-weight models whose chat template opens the reasoning tag
        Provider(name="local", base_url="http://127.0.0.1:8000/v1", wire_api="openai-chat", rules="local"),
    ]
    local = [
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
        "Qwen/QwQ-32B",
        "Qwen/Qwen3-30B-A3B-Thinking-2507",
        "Qwen/Qwen3-235B-A22B-Thinking-2507",
    ]
    assert [m.id for m in catalog.models] == [
        "openai/gpt-5-mini",
        "anthropic/claude-sonnet-4.5",
        "deepseek/deepseek-r1",
        "z-ai/glm-4.6",
        "claude-sonnet-4-5",
        "gpt-5-mini",
        *local,
    ]
    direct = {"claude-sonnet-4-5": "anthropic", "gpt-5-mini": "openai", **dict.fromkeys(local, "local")}
    for model in catalog.models:
        assert (model.reasoning_mode, model.preserve_reasoning) == ("effort", True)
        assert model.think_start == ("reasoning" if model.id in local else None)
        for endpoint in model.endpoints:
            assert endpoint.provider == direct.get(model.id, "openrouter")
            assert endpoint.supported_parameters is not None
            assert "reasoning" in endpoint.supported_parameters


def test_packaged_default_catalog_capabilities() -> None:
    catalog = default_catalog()
    mini = catalog.model("openai/gpt-5-mini")
    sonnet = catalog.model("anthropic/claude-sonnet-4.5")
    r1 = catalog.model("deepseek/deepseek-r1")
    assert mini is not None and sonnet is not None and r1 is not None
    assert mini.endpoints[0].reasoning is not None
    assert mini.endpoints[0].reasoning.supported_efforts == ["minimal", "low", "medium", "high"]
    assert sonnet.endpoints[0].reasoning is not None
    assert sonnet.endpoints[0].reasoning.supported_efforts == ["low", "medium", "high"]
    assert sonnet.endpoints[0].reasoning.supports_max_tokens is True
    assert r1.endpoints[0].reasoning is None


def test_read_catalog_reads_a_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(CONTRACT)
    assert read_catalog(str(path)) == load_catalog(CONTRACT, "x")


def test_read_catalog_errors_name_the_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(BASE + 'reasoning = { mandatory = "yes" }\n')
    with pytest.raises(CatalogError) as caught:
        read_catalog(str(path))
    assert str(caught.value) == (
        f'{path}: models[1] (id "openai/gpt-6-luna"): endpoints[0].reasoning.mandatory: expected bool, got str'
    )


def test_read_catalog_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(CatalogError) as caught:
        read_catalog(str(path))
    assert str(caught.value) == f"{path}: cannot read the file (No such file or directory)"


LISTING_CATALOG = """
[[providers]]
name = "openrouter"
base_url = "https://openrouter.ai/api/v1"

[[providers]]
name = "local"
base_url = "http://127.0.0.1:8080/v1"

[[models]]
id = "openai/gpt-6-luna"

[[models.endpoints]]
tag = "example-provider/primary"
provider = "openrouter"
supported_parameters = ["max_tokens", "reasoning", "include_reasoning", "tools"]
reasoning = { supported_efforts = ["low", "medium", "high"], default_effort = "medium", default_enabled = true, mandatory = false, supports_max_tokens = true }
pricing = { prompt = 0.00000125, completion = 0.00001, reasoning = 0.00002 }

[[models.endpoints]]
tag = "example-provider/budget"
provider = "local"
supported_parameters = ["max_tokens", "reasoning"]
reasoning = { supported_efforts = ["low"], mandatory = true }

[[models.endpoints]]
tag = "example-provider/bare"
provider = "local"

[[models]]
id = "deepseek/deepseek-r1"

[[models.endpoints]]
tag = "deepseek"
provider = "openrouter"
supported_parameters = ["reasoning"]

[[models]]
id = "qwen3"

[[models.endpoints]]
tag = "llama.cpp"
provider = "local"
reasoning = { default_enabled = true }
"""


def test_models_listing_uses_the_first_endpoint_and_published_fields_only() -> None:
    catalog = load_catalog(LISTING_CATALOG, "catalog.toml")
    assert models_listing(catalog) == {
        "object": "list",
        "data": [
            {
                "id": "openai/gpt-6-luna",
                "object": "model",
                "owned_by": "openai",
                "supported_parameters": ["max_tokens", "reasoning", "include_reasoning", "tools"],
                "reasoning": {
                    "supported_efforts": ["low", "medium", "high"],
                    "default_effort": "medium",
                    "default_enabled": True,
                    "mandatory": False,
                    "supports_max_tokens": True,
                },
            },
            {
                "id": "deepseek/deepseek-r1",
                "object": "model",
                "owned_by": "deepseek",
                "supported_parameters": ["reasoning"],
            },
            {"id": "qwen3", "object": "model", "owned_by": "local", "reasoning": {"default_enabled": True}},
        ],
    }


def test_endpoints_listing_lists_every_endpoint() -> None:
    model = load_catalog(LISTING_CATALOG, "catalog.toml").model("openai/gpt-6-luna")
    assert model is not None
    assert endpoints_listing(model) == {
        "data": {
            "id": "openai/gpt-6-luna",
            "endpoints": [
                {
                    "tag": "example-provider/primary",
                    "provider": "openrouter",
                    "supported_parameters": ["max_tokens", "reasoning", "include_reasoning", "tools"],
                    "reasoning": {
                        "supported_efforts": ["low", "medium", "high"],
                        "default_effort": "medium",
                        "default_enabled": True,
                        "mandatory": False,
                        "supports_max_tokens": True,
                    },
                    "pricing": {"prompt": "0.00000125", "completion": "0.00001", "internal_reasoning": "0.00002"},
                },
                {
                    "tag": "example-provider/budget",
                    "provider": "local",
                    "supported_parameters": ["max_tokens", "reasoning"],
                    "reasoning": {"supported_efforts": ["low"], "mandatory": True},
                },
                {"tag": "example-provider/bare", "provider": "local"},
            ],
        }
    }


def test_an_offer_that_does_not_take_the_reasoning_parameter_lists_no_reasoning_object() -> None:
    catalog = load_catalog(
        """
[[providers]]
name = "openrouter"
base_url = "https://openrouter.ai/api/v1"

[[models]]
id = "t/noreasonparam"

[[models.endpoints]]
tag = "openrouter/a"
provider = "openrouter"
supported_parameters = ["max_tokens", "tools"]
reasoning = { supported_efforts = ["low"] }
""",
        "catalog.toml",
    )
    offer = {"supported_parameters": ["max_tokens", "tools"]}
    assert models_listing(catalog)["data"] == [{"id": "t/noreasonparam", "object": "model", "owned_by": "t", **offer}]
    model = catalog.model("t/noreasonparam")
    assert model is not None
    assert endpoints_listing(model)["data"]["endpoints"] == [{"tag": "openrouter/a", "provider": "openrouter", **offer}]


def test_listings_are_copies_not_views_of_the_catalog() -> None:
    catalog = load_catalog(LISTING_CATALOG, "catalog.toml")
    listing = models_listing(catalog)
    listing["data"][0]["supported_parameters"].append("x")
    listing["data"][0]["reasoning"]["supported_efforts"].append("x")
    assert models_listing(catalog) != listing


def test_a_catalog_of_providers_only_routes_everything_to_the_first() -> None:
    catalog = load_catalog('[[providers]]\nname = "openrouter"\nbase_url = "https://openrouter.ai/api/v1"\n', "c.toml")
    assert catalog.models == []
