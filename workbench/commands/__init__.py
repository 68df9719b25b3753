"""CLI subcommands, one module each, registered by workbench/cli.py (each defines ``register(app)``); what they
share (the --json, --device, --dtype options, ``emit``, consoles, tables) is common.py."""
