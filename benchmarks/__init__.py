"""The numi_mw benchmark harness: ``python -m benchmarks`` (see ``benchmarks/README.md``).

Every figure is a ratio taken side by side in one run, over interleaved rounds: numi_mw against the bare app,
against a straightforward stdlib-``json`` implementation of the same rules (``benchmarks.baseline``), against a
bare SSE split, and, on loopback, against a plain pass-through proxy on the same stack (and LiteLLM when it is
installed). Absolute times are reported, never asserted.
"""
