"""``python -m app.launch run app/main.py [options]``: Streamlit's own command line (what ``workbench app``
starts), told first that app/pages/ is no v1 pages directory.

Streamlit treats a ``pages/`` folder beside the main script as a v1 multipage app until the first script run
calls ``st.navigation``; a fresh server's first request for a deep link (``/lens``) then ran that page file
alone, with a navigation of file names ("main, attribution, blackbox, ..."). app/main.py's ``st.navigation``
names every page, so the folder is never meant that way.
"""

from __future__ import annotations

import sys

from streamlit.runtime.pages_manager import PagesManager
from streamlit.web.cli import main

PagesManager.uses_pages_directory = False


def with_minimal_toolbar(argv: list[str]) -> list[str]:
    """``argv`` with Streamlit's toolbar in minimal mode (no Deploy button, no developer menu) unless the
    caller chose a mode."""
    if len(argv) > 1 and argv[1] == "run" and not any(a.startswith("--client.toolbarMode") for a in argv):
        return [*argv, "--client.toolbarMode", "minimal"]
    return argv


if __name__ == "__main__":
    sys.argv = with_minimal_toolbar(sys.argv)
    main(prog_name="streamlit")
