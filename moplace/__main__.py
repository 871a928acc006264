"""``python -m moplace``: the command line, as the ``moplace`` script runs it."""

import sys

from .cli import main

sys.exit(main())
