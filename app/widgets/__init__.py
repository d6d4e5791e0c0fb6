"""The streamlit pieces pages share: the sidebar, the area picker, the current view's panel, the download menu,
the lecture preparation panel."""
