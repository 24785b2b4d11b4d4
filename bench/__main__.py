"""``python -m bench``: see ``bench.runner``."""

import sys

from bench.runner import main

sys.exit(main())
