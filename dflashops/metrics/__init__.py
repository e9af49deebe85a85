"""Server-side numbers: Prometheus scrapes, spec-decode counter deltas and engine log lines.

Pure parsing and arithmetic; no I/O beyond what a caller hands in. ``prometheus`` parses the text
exposition format, ``spec_decode`` turns two scrapes into acceptance figures, and ``logs`` turns
vLLM and SGLang log lines into typed windows.
"""
