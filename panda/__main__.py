"""``python -m panda``: the command line interface (:mod:`panda.cli`)."""

import sys

from panda.cli import main

if __name__ == "__main__":
    sys.exit(main())
