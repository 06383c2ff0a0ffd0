"""The pure core of numi_mw: plain data in, plain data out.

Imports msgspec and the standard library only (no framework, no I/O); ``tests/test_core_purity.py`` asserts it.
"""
