"""`python -m generator` runs the microtvm-gen command line."""

import sys

from generator.cli import main

sys.exit(main())
