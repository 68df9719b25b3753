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
    ("pages/circuits.py", "Circuits", ":material/share:"),
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

st.set_page_config(page_title="workbench", page_icon=":material/biotech:", layout="wide")
here = Path(__file__).parent
nav = st.navigation(
    [
        st.Page(str(here / path), title=title, icon=icon, default=(i == 1))
        for i, (path, title, icon) in enumerate(PAGES)
    ]
)
nav.run()
