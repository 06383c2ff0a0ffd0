"""numi_mw: makes LLM reasoning traffic correct across providers.

Three forms share one pure core (``numi_mw.core``): ``ReasoningMiddleware`` (pure ASGI), the sidecar
(``numi_mw.proxy.create_app``, ``numi-mw serve``) and the benchmark harness (``benchmarks/``).
"""

from numi_mw.core.controls import ReasoningControls
from numi_mw.core.errors import ApiError
from numi_mw.core.providers import PROVIDERS, ProviderRules, get_provider, infer_provider
from numi_mw.core.request import PreparedRequest, prepare_request
from numi_mw.middleware import ReasoningMiddleware
from numi_mw.proxy import create_app

__all__ = [
    "PROVIDERS",
    "ApiError",
    "PreparedRequest",
    "ProviderRules",
    "ReasoningControls",
    "ReasoningMiddleware",
    "create_app",
    "get_provider",
    "infer_provider",
    "prepare_request",
]
__version__ = "0.1.0"
