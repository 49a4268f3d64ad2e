"""The daemon: its client, its security, its hosts, and calls through it that match calls without it."""
