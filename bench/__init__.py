"""Benchmarks: ``make bench`` (``python -m bench.run``) measures xcsh-run and its peers side by side."""
