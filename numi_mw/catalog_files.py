"""Catalog files: the shell side of ``numi_mw.core.catalog`` (reads files, then hands the text to the core).

``default_catalog()`` reads the packaged ``numi_mw/catalog.toml`` (shipped in the wheel); ``read_catalog(path)``
reads a catalog the operator names (``numi-mw serve --catalog FILE``, ``numi-mw catalog check FILE``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from numi_mw.core.catalog import Catalog, CatalogError, load_catalog

DEFAULT_CATALOG = "catalog.toml"


def default_catalog() -> Catalog:
    """The packaged default catalog (spec 000 "Reasoning Modes": OpenRouter, ``effort`` with preservation).

    Raises:
        CatalogError: the packaged file is broken (a packaging bug; a test loads it).
    """
    text = resources.files("numi_mw").joinpath(DEFAULT_CATALOG).read_bytes()
    return load_catalog(text, f"numi_mw/{DEFAULT_CATALOG}")


def read_text(path: str) -> bytes:
    """The bytes of the catalog file at ``path``.

    Raises:
        CatalogError: the file cannot be read (the message names the file as given).
    """
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CatalogError(path, None, None, f"cannot read the file ({exc.strerror or exc})") from None


def read_catalog(path: str) -> Catalog:
    """Read and check the catalog at ``path``; error messages name the file as given.

    Raises:
        CatalogError: the file cannot be read, or ``load_catalog`` rejects it (the message names the file, the
            entry and the field).
    """
    return load_catalog(read_text(path), path)
