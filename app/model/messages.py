"""Plain words for the errors a person can meet in the dashboard (pure: no streamlit).

The library's messages are written for programmers (they name function parameters such as
``gamma_km`` or functions such as ``network_from_file(path)``), and the job workers prefix them
with the exception's class. :func:`plain_error` turns them into what happened and what to do, in the
dashboard's words; the original text is returned separately, for a "Details" line at the end.
"""

from __future__ import annotations

import re

__all__ = ["plain_error", "short_status", "looks_technical", "plain"]

#: "ValueError: ", "panda.errors.OfflineError: " ... at the start of a relayed message.
_CLASS_PREFIX = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Timeout|Exit|Interrupt)):\s*")
#: Signs of programmer text: snake_case names, calls like f(x), class names, module paths.
_TECHNICAL = re.compile(
    r"\b[a-z]+_[a-z0-9_]+\b|\b\w+\([\w, ]*\)|\b[A-Z]\w*(?:Error|Exception)\b|\bpanda\.\w+|Traceback|\.py\b"
)


def looks_technical(text: str) -> bool:
    """True when ``text`` names code (a snake_case name, a call, an exception class, a module)."""
    return bool(_TECHNICAL.search(text))


def _strip_class(text: str) -> str:
    while True:
        stripped = _CLASS_PREFIX.sub("", text, count=1)
        if stripped == text:
            return text.strip()
        text = stripped


def _rules(text: str) -> str | None:
    """The plain sentence for a known library or worker message, else None."""
    m = re.search(r"safety-margin search would examine.*?gamma = ([\d,.]+) m puts about ([\d,.]+) records", text)
    if m or "safety-margin search would examine" in text:
        near = f": with γ = {m.group(1)} m, about {m.group(2)} records lie within γ of a typical record" if m else ""
        return (
            f"The safety margins would need far too much work{near}. "
            "Choose a smaller threshold distance γ (or γ = auto), fewer records K or a smaller neighbourhood Γ."
        )
    if "MemoryError" in text or "more memory than the dashboard allows" in text or "too large to send back" in text:
        return "The computation needs more memory than the dashboard allows."
    m = re.search(r"did not finish within ([\d,.]+) s", text)
    if m:
        return f"The computation did not finish within {m.group(1)} s and was stopped."
    if "computing cluster at" in text and "cannot be reached" in text:
        return (
            "The dashboard's computing cluster cannot be reached. Try again in a minute; if it persists, tell its host."
        )
    m = re.search(r"waited ([\d,.]+) s without a free worker", text)
    if m:
        return f"No computing worker was free for {m.group(1)} s (the class's cluster is busy). Try again in a moment."
    if "crashed its process" in text:
        return "The computation stopped unexpectedly (most likely it ran out of memory)."
    if "worker process" in text:
        return "The dashboard's computing process could not start. Reload the page; if that does not help, restart it."
    m = re.search(r"'n_records' parameter of make_instance must be at most the network's (\d+) nodes", text)
    if m:
        return f"This road network has only {m.group(1)} nodes: choose at most {m.group(1)} secret records K."
    m = re.search(r"'n_outputs' parameter of make_instance must be at most n_records \((\d+)\)", text)
    if m:
        return f"There can be at most as many outputs as secret records (K = {m.group(1)})."
    m = re.search(r"'n_users' parameter of make_instance must be at most n_records \((\d+)\)", text)
    if m:
        return f"There can be at most as many users as secret records (K = {m.group(1)}): each user has their own."
    m = re.search(r"bounding box of network_from_bbox must be at most ([\d,.]+) km\^2. Got ([\d,.]+) km", text)
    if m:
        return (
            f"The box is too large to download: about {m.group(2)} km², the limit is {m.group(1)} km² "
            "(the paper's Rome box is about 2,330 km²)."
        )
    if "Cannot reach the Overpass server" in text or "names no host" in text:
        return "There is no connection to the OpenStreetMap server, so live downloads do not work from here."
    if "Overpass server answered with an error" in text:
        return "The OpenStreetMap server answered with an error; it may be busy. Try again later or a smaller box."
    if "answer could not be used" in text or "could not be turned into a graph" in text:
        return "The OpenStreetMap server's answer could not be turned into a road network."
    if re.search(r"The download from \S+ failed", text):
        return "The download from the OpenStreetMap server failed."
    if re.search(r"holds no (usable )?'?\w*'? ?road", text) or "holds no '" in text:
        return "This box holds no usable roads in OpenStreetMap: choose a larger box."
    if "is not a road network" in text or "has no roads" in text or "has no nodes" in text:
        return "This area has no usable road network."
    return None


#: Exception classes whose plain text needs no "Details" line (the job layer's own ones included).
_PLAIN_KINDS = ("ValueError", "RuntimeError", "WorkerError", "JobError", "JobTimeout", "InstanceTooLargeError")


def plain_error(error: BaseException | str) -> tuple[str, str]:
    """``(plain, details)``: what happened in plain words, and the original text for a "Details" line.

    ``details`` is empty when the original text was already plain (then ``plain`` is that text).
    """
    original = error if isinstance(error, str) else str(error)
    kind = "" if isinstance(error, str) else type(error).__name__
    full = f"{kind}: {original}" if kind and original else (kind or original)
    text = _strip_class(original)
    plain = _rules(full)
    if plain is None and text and not looks_technical(text):
        plain = text if text.endswith((".", "!", "?")) else text + "."
        return plain, ("" if not kind or kind in _PLAIN_KINDS else full)
    if plain is None:
        plain = "The computation stopped with an unexpected error."
    return plain, full


def short_status(status: str) -> tuple[str, str]:
    """A solver or mechanism status as ``(word, detail)``: one short word for a table or a metric.

    "Optimal" and "solved" -> ("solved", ""); "solved (what it is)" -> ("solved", "what it is");
    "Time limit reached" -> ("stopped", "time limit reached");
    "unsolved: time limit after 20.3 s" -> ("unsolved", "time limit after 20.3 s"); "failed: ..." ->
    ("failed", the reason in plain words).
    """
    text = (status or "").strip()
    low = text.lower()
    if low in ("optimal", "solved"):
        return "solved", ""
    if low.startswith("solved (") and text.endswith(")"):  # a qualified result: "solved (paper's LP+BD: ...)"
        return "solved", text[len("solved (") : -1]
    if low == "no anchors":
        return "—", "no anchors"
    if low == "time limit reached":
        return "stopped", "time limit reached"
    if low.startswith("too large"):
        return "skipped", text[0].lower() + text[1:]
    head, sep, rest = text.partition(":")
    if sep and head.strip().lower() in ("unsolved", "failed", "interrupted"):
        detail = rest.strip()
        if head.strip().lower() == "failed":
            plain, _ = plain_error(detail)
            detail = plain.rstrip(".")
        return head.strip().lower(), detail
    if not text:
        return "—", ""
    return "failed", text


#: Characters Streamlit's markdown gives a meaning to inside a line (links, images, emphasis, code, HTML, tables,
#: maths, character references such as "&amp;").
_MARKDOWN = set("\\`*_{}[]()<>#+!|~$@&")
#: A zero-width space: invisible, but it breaks the bare addresses below.
ZERO_WIDTH_SPACE = "\u200b"
#: Where Streamlit's markdown would make something of plain text, escapes or not: GitHub's autolinks (applied to the
#: text after parsing) at "http://" and "https://", "www." and an e-mail's "@", in any case; Streamlit's own
#: ":material/icon:", ":emoji:" and ":colour[text]" after a colon. A zero-width space goes in there ("https:\u200b//",
#: "www\u200b.", "a\u200b@b.org", ":\u200bsmile:"), so no value of a link becomes a link, an icon or a colour.
_AUTOLINK = re.compile(r"(?<=:)(?=\S)|(?i:(?<=www))(?=\.)|(?=\\@)")


def plain(text: str) -> str:
    """``text`` shown literally by Streamlit's markdown, on one line: markup characters escaped, and addresses and
    Streamlit's shortcodes broken by a zero-width space (no link, image, icon, emphasis or colour can come from a
    value in a link); ``.``, ``/``, ``=`` and quotes stay as they are."""
    out = "".join("\\" + c if c in _MARKDOWN else c for c in " ".join(str(text).split()))
    return _AUTOLINK.sub(ZERO_WIDTH_SPACE, out)
