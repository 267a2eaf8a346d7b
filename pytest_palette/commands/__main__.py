"""`python -m pytest_palette.commands`: palette-bench without its console script."""

import sys

from . import main

sys.exit(main())
