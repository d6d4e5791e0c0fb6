"""numba's cache of compiled code, kept in a folder of this account's own.

numba loads its cache files with pickle: a file someone else could write into that folder would run as the
server's user the next time the code is loaded. Left alone, numba writes beside the source (``__pycache__`` of
wherever panda is installed) or into a user-wide folder. :func:`use_private_cache` points it at
``NUMBA_CACHE_DIR`` if set, else ``<panda's cache folder>/numba``, and uses that folder only if it is a folder
(not a symbolic link) owned by this user; its group and other permission bits are removed. Any other folder is
replaced by a new private temporary one (the code is compiled again: time lost, never safety).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from panda.network.folders import CACHE_DIR, private_folder_problem

__all__ = ["CACHE_ENV", "use_private_cache"]

log = logging.getLogger(__name__)

#: numba's own setting (read at its import; child processes, such as the Dask workers, inherit it).
CACHE_ENV = "NUMBA_CACHE_DIR"

_chosen: str | None = None


def use_private_cache(numba: Any) -> str:
    """Point ``numba`` (the imported module) and this process's children at a private cache folder; return it."""
    global _chosen
    if _chosen is None:
        wanted = Path(os.environ.get(CACHE_ENV, "").strip() or CACHE_DIR / "numba").expanduser().absolute()
        problem = private_folder_problem(wanted)
        if problem is None:
            _chosen = str(wanted)
        else:
            _chosen = tempfile.mkdtemp(prefix="panda-numba-")  # 0700, new: nobody else wrote into it
            log.warning("numba's cache folder %s is not used (%s); compiling into %s instead", wanted, problem, _chosen)
        os.environ[CACHE_ENV] = _chosen
    numba.config.CACHE_DIR = _chosen
    return _chosen
