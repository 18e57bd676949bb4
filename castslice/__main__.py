"""`python -m castslice`: the same command line as the `castslice` console script."""

import sys

from castslice.cli import main

sys.exit(main())
