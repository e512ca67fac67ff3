"""``python -m mnistbench.cli``: the command without the console script's fork server."""

import sys

from mnistbench.cli import main

sys.exit(main())
