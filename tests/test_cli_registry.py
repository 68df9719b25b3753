"""Every command is registered even when a command module is imported before the CLI (as the app does)."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json
import workbench.commands.faithfulness, workbench.commands.attribute_set
from workbench.cli import app
print(json.dumps(sorted(c.name for c in app.registered_commands if c.name)))
"""


def test_command_module_first_keeps_every_command():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120, check=True)
    names = json.loads(out.stdout)
    assert {"faithfulness", "attribute-set", "attribute", "models"} <= set(names)
