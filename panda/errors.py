"""Public exception and warning types of :mod:`panda`.

Bad arguments raise the built-in :class:`TypeError` or :class:`ValueError` with a message that
names the parameter, the allowed values and what was given. The types below cover the failures
that are not a bad argument.
"""

from __future__ import annotations

__all__ = [
    "PandaError",
    "DataUnavailableError",
    "DownloadError",
    "OfflineError",
    "PandaWarning",
]


class PandaError(Exception):
    """Base class of every error raised on purpose by :mod:`panda`."""


class DataUnavailableError(PandaError, FileNotFoundError):
    """A data set the call needs is not present on this machine (e.g. the paper's Rome network)."""


class DownloadError(PandaError):
    """A live OpenStreetMap download failed (server error, bad answer, no roads returned)."""


class OfflineError(DownloadError, ConnectionError):
    """No connection to the Overpass server: live downloads are impossible here.

    The message names the embedded cities (:func:`panda.list_cities`), which work offline.
    """


class PandaWarning(UserWarning):
    """Something was computed, but a user should know about a caveat (e.g. a capped value)."""
