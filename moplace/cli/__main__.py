"""``python -m moplace.cli``: the command line, as the ``moplace`` script runs it."""

import sys

from . import main

sys.exit(main())
