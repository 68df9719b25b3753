"""CLI subcommands, one module each; see workbench/cli.py.

workbench.cli is imported first, whatever imports a command module: the CLI registers every module here
while it loads, and a module caught half-imported (its import started before the CLI's) would be left
out of the command list.
"""

import workbench.cli  # noqa: F401
