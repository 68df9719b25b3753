"""vision page (being built)."""

import streamlit as st

st.title("vision")
st.info("This page is being built.")
