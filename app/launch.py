"""``python -m app.launch run app/main.py [options]``: Streamlit's own command line (what ``workbench app``
starts), told first that app/pages/ is no v1 pages directory.

Streamlit treats a ``pages/`` folder beside the main script as a v1 multipage app until the first script run
calls ``st.navigation``; a fresh server's first request for a deep link (``/lens``) then ran that page file
alone, with a navigation of file names ("main, attribution, blackbox, ..."). app/main.py's ``st.navigation``
names every page, so the folder is never meant that way.
"""

from __future__ import annotations

from streamlit.runtime.pages_manager import PagesManager
from streamlit.web.cli import main

PagesManager.uses_pages_directory = False

if __name__ == "__main__":
    main(prog_name="streamlit")
