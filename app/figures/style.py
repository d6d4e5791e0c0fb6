"""The dashboard's few style rules (pure: returns CSS text for ``st.html``).

Phones (``max-width: 640px``, e.g. 390x844): Streamlit stacks ``st.columns`` in source order, so on the
Lesson the map (the left column) would come before the mechanism, ε and the places, and the title would
hide under Streamlit's 60 px header. :data:`_PHONE` lifts the right column's children into the Lesson's main row
(``display: contents``) and orders them: the controls and the key numbers, then the map (shorter), then
the tabs. The map's element and its full-screen frame shrink with its canvas (Streamlit gives them the
540 px the page asks for: 140 px of blank under a 400 px map). The Lesson's main row is found by the
widget keys it holds (``st-key-lesson_mech`` and ``st-key-lesson_tab``: Streamlit puts ``st-key-<key>``
on a keyed element), so the page needs no extra hook. Plotly's mode bar is hidden on a phone: a touch
screen shows it all the time, over the charts' legends and labels (the Download menu exports the charts).
"""

from __future__ import annotations

__all__ = ["PHONE_MAX_WIDTH_PX", "PHONE_MAP_HEIGHT_PX", "css"]

#: Screens at most this wide get the phone layout.
PHONE_MAX_WIDTH_PX = 640
#: The Lesson map's height on a phone (540 px on a larger screen: a full phone screen of map).
PHONE_MAP_HEIGHT_PX = 400

#: Less empty space above the page, so the map and its numbers fit a 1280x720 projector.
_BASE = """
.block-container { padding-top: 2.2rem; padding-bottom: 1rem; }
h4 { padding-top: 0.1rem; }
.st-key-lesson_title h1 { font-size: 1.5rem; font-weight: 600; line-height: 1.2; padding: 0.5rem 0 1rem 0; }
[data-testid="stMetricValue"] { font-size: 1.75rem; }
"""
#: WCAG AA contrast (4.5:1 for small text, found by axe-core, tests/browser/test_browser_a11y.py): Streamlit's
#: captions are the text colour at opacity 0.6, #828180 on white (3.9:1); ours are opaque #5e5d5c
#: (6.5:1 on white, 5.9:1 on the sidebar's grey); a selected segmented-control option or pill
#: is #c53948 on its 10 % tint (4.47:1), it becomes #a32a38 (6.2:1); a button's keyboard shortcut hint (the
#: guided lesson's Page Down) is drawn faded (white at 0.6 on the primary red, 2.7:1): it takes the button's own
#: text colour.
_CONTRAST = """
button kbd[aria-label^="Shortcut"] { color: inherit; opacity: 1; }
[data-testid="stCaptionContainer"] { color: #5e5d5c; opacity: 1; }
button[data-variant="segmented_control"][aria-checked="true"],
button[data-variant="segmented_control"][aria-checked="true"] p,
button[data-variant="pills"][data-selected="true"],
button[data-variant="pills"][data-selected="true"] p { color: #a32a38; }
"""
#: Presenter view: larger type (streamlit sizes everything in rem), even less padding.
_PRESENT = """
html { font-size: 18px; }
.block-container { padding-top: 3.2rem; padding-left: 1.5rem; padding-right: 1.5rem; }
[data-testid="stMetricValue"] { font-size: 2rem; }
"""
#: The Lesson's main row (map column | controls column), and its controls column.
_MAIN = '[data-testid="stHorizontalBlock"]:has(.st-key-lesson_mech):has(.st-key-lesson_tab)'
_CONTROLS = f'{_MAIN} > [data-testid="stColumn"]:has(.st-key-lesson_mech)'
_MAP_COLUMN = f'{_MAIN} > [data-testid="stColumn"]:not(:has(.st-key-lesson_mech))'
#: A map's full-screen frame, and the element holding one (``:has`` does not nest).
_DECK_FRAME = '[data-testid="stFullScreenFrame"]:has(> [data-testid="stDeckGlJsonChart"])'
_DECK_ELEMENT = (
    '[data-testid="stElementContainer"]:has(> [data-testid="stFullScreenFrame"] > [data-testid="stDeckGlJsonChart"])'
)
_MAP_TOOLS = '[data-testid="stHorizontalBlock"]:has(.st-key-lesson_mode)'
#: Phones: the title clears the header (60 px); on the Lesson the controls come before the map.
_PHONE = f"""
@media (max-width: {PHONE_MAX_WIDTH_PX}px) {{
  .block-container {{ padding-top: 4.5rem; padding-left: 0.75rem; padding-right: 0.75rem; }}
  {_MAIN} {{ flex-direction: column; flex-wrap: nowrap; }}
  {_CONTROLS}, {_CONTROLS} > [data-testid="stVerticalBlock"] {{ display: contents; }}
  {_MAP_COLUMN} {{ order: 1; width: 100%; flex: 0 0 auto; }}
  {_MAIN} .st-key-lesson_tab {{ order: 2; }}
  {_MAIN} [data-testid="stHorizontalBlock"] > [data-testid="stColumn"] {{ min-width: 0; }}
  {_MAP_TOOLS} > [data-testid="stColumn"] {{ flex: 0 0 auto; width: auto; }}
  {_MAP_TOOLS} > [data-testid="stColumn"]:last-child {{ display: none; }}
  {_MAP_COLUMN} [data-testid="stDeckGlJsonChart"] {{ height: {PHONE_MAP_HEIGHT_PX}px !important; }}
  {_MAP_COLUMN} {_DECK_ELEMENT},
  {_MAP_COLUMN} {_DECK_FRAME} {{
    flex: 0 0 auto !important; height: {PHONE_MAP_HEIGHT_PX}px !important; }}
  .js-plotly-plot .modebar-container {{ display: none !important; }}
}}
"""


def css(*, presenting: bool) -> str:
    """The ``<style>`` element of the page (larger type in the presenter view, the phone layout last)."""
    return "<style>" + _BASE + _CONTRAST + (_PRESENT if presenting else "") + _PHONE + "</style>"
