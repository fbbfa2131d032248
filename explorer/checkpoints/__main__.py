"""`python -m explorer.checkpoints`."""

import sys

from explorer.checkpoints.store import main

sys.exit(main())
