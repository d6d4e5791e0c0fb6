"""PAnDA Explorer: the Streamlit dashboard (``streamlit run app``). The library never imports it."""
