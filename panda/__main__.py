"""``python -m panda``: the command line interface (:mod:`panda.cli`)."""

import sys

from panda.cli import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["prepare"]:  # the dashboard's views, ahead of a lecture (app/prepare.py)
        from app.prepare import main as prepare

        sys.exit(prepare(sys.argv[2:]))
    sys.exit(main())
