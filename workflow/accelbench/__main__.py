"""``python -m accelbench`` = the ``accelbench`` command."""

import sys

from .cli import main

sys.exit(main())
