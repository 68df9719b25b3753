"""toy_circuits page (being built)."""

import streamlit as st

st.title("toy_circuits")
st.info("This page is being built.")
