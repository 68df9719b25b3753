"""The workbench app: `workbench app` (or `streamlit run app/main.py`). One module per page in app/pages."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # pages import `app.common`, engines import `attribution`, `circuits`
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

PAGES = [
    ("pages/model.py", "Model", ":material/memory:"),
    ("pages/attribution.py", "Attribution", ":material/account_tree:"),
    ("pages/lens.py", "Lens", ":material/visibility:"),
    ("pages/flow.py", "Flow by token", ":material/timeline:"),
    ("pages/circuits.py", "Circuits", ":material/share:"),
    ("pages/benchmark.py", "Circuit benchmark", ":material/leaderboard:"),
    ("pages/prompt_sets.py", "Prompt sets", ":material/list_alt:"),
    ("pages/vision.py", "Vision", ":material/image:"),
    ("pages/toy_circuits.py", "Toy circuits", ":material/hub:"),
    ("pages/probes.py", "Probes and concepts", ":material/explore:"),
    ("pages/sae.py", "SAE features", ":material/category:"),
    ("pages/feature_graph.py", "Feature graph", ":material/schema:"),
    ("pages/blackbox.py", "Black-box recovery", ":material/lock_open:"),
    ("pages/runs.py", "Runs", ":material/folder_open:"),
    ("pages/jobs.py", "Jobs", ":material/pending_actions:"),
]

DEFAULT = 1  # Attribution, served at the root URL

# The favicon is the app's own file (a material icon made the browser fetch it from a font host, which
# fails offline).
st.set_page_config(page_title="workbench", page_icon=str(Path(__file__).parent / "static" / "favicon.png"),
                   layout="wide")
here = Path(__file__).parent
pages = [
    # the default page answers the root URL; its own path ("attribution") answers through the hidden twin below
    st.Page(str(here / path), title=title, icon=icon, default=(i == DEFAULT),
            url_path="home" if i == DEFAULT else None)
    for i, (path, title, icon) in enumerate(PAGES)
]
# /attribution opens the default page too (a deep link to it said "Page not found")
pages.append(st.Page(str(here / PAGES[DEFAULT][0]), title=PAGES[DEFAULT][1], icon=PAGES[DEFAULT][2],
                     url_path=Path(PAGES[DEFAULT][0]).stem, visibility="hidden"))
nav = st.navigation(pages, expanded=True)  # every page listed: Runs and Jobs were behind "View 3 more"
nav.run()
