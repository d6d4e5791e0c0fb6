"""Figure builders: plotly figures, pydeck decks, the palette, CSS text and tables, from plain values.

Never imports streamlit (tests/project/test_dependencies.py holds it): a figure is built, tested and exported without a
running page.
"""
