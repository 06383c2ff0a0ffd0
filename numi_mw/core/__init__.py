"""The pure core of numi_mw: plain data in, plain data out.

Imports msgspec and the standard library only (no framework, no I/O); ``tests/test_core_purity.py`` asserts it.
"""


def build() -> str:
    """Which build of the core this process imports: ``"compiled (mypyc)"`` when its modules are the optional
    build's C extensions (``.ci/build-mypyc``'s folder first on the path; ``docs/performance.md``, "The compiled
    core"), else ``"pure Python"``."""
    from numi_mw.core import history

    return "compiled (mypyc)" if (history.__file__ or "").endswith(".so") else "pure Python"
