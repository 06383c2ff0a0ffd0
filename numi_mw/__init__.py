"""numi_mw: makes LLM reasoning traffic correct across providers.

Three forms share one pure core (``numi_mw.core``): ``ReasoningMiddleware`` (pure ASGI), the sidecar
(``numi_mw.proxy.create_app``, ``numi-mw serve``) and the httpx transports for apps that call providers
themselves (``NormalizingTransport``, ``SyncNormalizingTransport``); the benchmark harness (``benchmarks/``)
measures them. The names below are the public API; ``docs/`` describes each.
"""

import logging

from numi_mw.core.accumulate import AccumulatedChoice, Accumulator
from numi_mw.core.catalog import Catalog, CatalogError, load_catalog
from numi_mw.core.controls import ReasoningControls
from numi_mw.core.details import rebuild_reasoning_details
from numi_mw.core.errors import ERROR_CODES, ApiError
from numi_mw.core.providers import PROVIDERS, ProviderRules, infer_provider, provider_rules
from numi_mw.core.request import PreparedRequest, prepare_request
from numi_mw.core.response import JSONRewriter, ResponseOptions, SSERewriter, choose_rewriter
from numi_mw.core.routing import Route, fixed_route
from numi_mw.core.think import ThinkTags
from numi_mw.middleware import ReasoningMiddleware
from numi_mw.proxy import create_app
from numi_mw.transport import NormalizingTransport, SyncNormalizingTransport

__all__ = [
    "ERROR_CODES",
    "PROVIDERS",
    "AccumulatedChoice",
    "Accumulator",
    "ApiError",
    "Catalog",
    "CatalogError",
    "JSONRewriter",
    "NormalizingTransport",
    "PreparedRequest",
    "ProviderRules",
    "ReasoningControls",
    "ReasoningMiddleware",
    "ResponseOptions",
    "Route",
    "SSERewriter",
    "SyncNormalizingTransport",
    "ThinkTags",
    "choose_rewriter",
    "create_app",
    "fixed_route",
    "infer_provider",
    "load_catalog",
    "prepare_request",
    "provider_rules",
    "rebuild_reasoning_details",
]
__version__ = "0.1.0"

# A library's loggers write nowhere until the application configures logging (``numi-mw serve`` does).
logging.getLogger("numi_mw").addHandler(logging.NullHandler())
