"""sae page (being built)."""

import streamlit as st

st.title("sae")
st.info("This page is being built.")
