"""probes page (being built)."""

import streamlit as st

st.title("probes")
st.info("This page is being built.")
