"""``python -m xdscore``: the same as the ``xdscore`` command."""

import sys

from .cli import main

sys.exit(main())
