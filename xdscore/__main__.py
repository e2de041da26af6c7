"""``python -m xdscore``: the same as the ``xdscore`` command."""

import sys

from ._cli import main

sys.exit(main())
