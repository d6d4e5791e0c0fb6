"""View logic and words: the view's parameters and link, the numbers and sentences pages show, messages, and the
files a view downloads.

Never imports streamlit (tests/project/test_dependencies.py holds it).
"""
