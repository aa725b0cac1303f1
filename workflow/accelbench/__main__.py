"""``python -m accelbench`` = the ``accelbench`` command."""

import sys

from accelbench.cli import main

sys.exit(main())
