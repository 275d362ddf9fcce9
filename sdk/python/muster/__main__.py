"""`python3 -m muster ...`: the muster command line (see muster.cli)."""
import sys

from .cli import main

sys.exit(main())
