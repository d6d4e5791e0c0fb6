"""PAnDA Explorer dashboard: the entry point of ``streamlit run app``.

Page config, the shared sidebar (the view's parameters, kept in the URL) and the navigation.
"""

import base64
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run app` without the package installed
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app import client_address, run_slots, state  # noqa: E402
from app.figures import style  # noqa: E402
from app.model import messages  # noqa: E402
from app.model.params import DEFAULT_PAGE_LOSS, PAGE_LOSS  # noqa: E402
from app.server import lecturer, malloc  # noqa: E402
from app.widgets import lecturer_sign_in, prepare_panel, sidebar  # noqa: E402

# The server's memory stays level over a lesson (once per process; see app/server/malloc.py).
malloc.tune()
malloc.start_trimmer()
malloc.start_gc_freezer()  # Streamlit's full collection after every run then walks only the newer objects

# The page icon as a data URI (2.7 KB): a ":material/...:" icon makes the browser fetch it from
# fonts.gstatic.com, and a file path is served from Streamlit's media store, which deletes a run's
# files when the next run replaces them, so a browser fetching the icon meanwhile got a 404.
FAVICON = "data:image/png;base64," + base64.b64encode((ROOT / "assets" / "favicon.png").read_bytes()).decode("ascii")
# Presenter view (a projector at 1280x720): the sidebar starts collapsed, the type is larger.
if "w_present" not in st.session_state:
    st.session_state["w_present"] = st.query_params.get("present") == "1"
PRESENTING = bool(st.session_state["w_present"])
st.set_page_config(
    page_title="PAnDA Explorer",
    page_icon=FAVICON,
    layout="wide",
    initial_sidebar_state="collapsed" if PRESENTING else "auto",
)
st.html(style.css(presenting=PRESENTING))
st.session_state["present"] = PRESENTING
lecturer.announce()  # the key on the server's console, once per process
lecturer_sign_in.consume_link_key()  # ?lecturer=KEY signs this session in and leaves the address

state.panda_worker()  # starts the worker process (if not running) while the sidebar loads the network


def serve_page() -> None:
    """The navigation, the sidebar and the page (the run's slot of its client's address held meanwhile)."""
    pages = [
        st.Page("app_pages/lesson.py", title="Lesson", icon=":material/school:", default=True),
        st.Page("app_pages/guided.py", title="Guided lesson", icon=":material/slideshow:", url_path="guided"),
        st.Page("app_pages/explore.py", title="PAnDA", icon=":material/map:", url_path="explore"),
        st.Page("app_pages/plan.py", title="Plan", icon=":material/target:", url_path="plan"),
        st.Page("app_pages/learn.py", title="Learn", icon=":material/menu_book:"),
        st.Page("app_pages/compare.py", title="Compare", icon=":material/leaderboard:"),
        st.Page("app_pages/audit.py", title="Audit", icon=":material/fact_check:"),
    ]
    # The class round (opened from the Lesson's presenter view and from a join link): not in the menu.
    game_pages = [
        st.Page(
            "app_pages/host.py", title="Class round", icon=":material/groups:", url_path="host", visibility="hidden"
        ),
        st.Page("app_pages/play.py", title="Play", icon=":material/touch_app:", url_path="play", visibility="hidden"),
    ]
    page = st.navigation(pages + game_pages)
    if any(page is p for p in game_pages):  # their view comes from the class database, not from the sidebar
        page.run()
        st.stop()

    # The shown page's default loss (the page by identity: a page run outside a server, say a module
    # re-imported as __main__ by a process pool, has no title).
    keys = ("lesson", "guided", "explore", "plan", "learn", "compare", "audit")
    page_keys = {id(p): key for p, key in zip(pages, keys, strict=True)}
    shown = page_keys.get(id(page), "")
    params = sidebar.render(
        page_loss=PAGE_LOSS.get(shown, DEFAULT_PAGE_LOSS), fold_expert=shown in ("lesson", "guided")
    )
    st.session_state["params"] = params
    sidebar.write_query(params)
    if PRESENTING:  # the lecturer prepares the view before the class (python -m panda prepare, in the background)
        with st.sidebar:
            prepare_panel.panel(params, page_keys.get(id(page), "lesson"))
    for problem in st.session_state.pop("query_problems", None) or []:
        # A warning, not a toast: it stays until read, and a toast is a dialog without a name (axe's aria-dialog-name).
        st.warning(messages.plain(f"Link parameter {problem}"), icon=":material/link_off:")  # no markup from a link

    page.run()


_address = client_address.client_address()
with run_slots.slot(client_address.address_group(_address) if _address else None) as _got_slot:
    if not _got_slot:  # this address's other pages held every slot for a minute
        st.warning("Many pages from your address are loading at once, and this one waited too long: reload it.")
        st.stop()
    serve_page()
