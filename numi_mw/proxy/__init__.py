"""The sidecar: a streaming reverse proxy in front of one upstream (``numi-mw serve``)."""

from numi_mw.proxy.app import create_app

__all__ = ["create_app"]
