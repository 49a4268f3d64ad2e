"""The xcsh-run worker: the process that imports and runs one tool module.

Import rule: this package imports only the standard library and msgspec. It
never imports ``trio`` or ``runner`` (a test checks ``sys.modules`` inside a
live worker), so a worker starts fast and a tool cannot reach the host's
machinery. Tool authors import :mod:`xcsh_run.pi`; everything else is private.
"""
