"""python -m tools.emulate: see the package's docstring, or --help."""
import sys

from .cli import main

sys.exit(main())
