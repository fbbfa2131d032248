"""`python -m explorer.study`."""

import sys

from explorer.study.grid import main

sys.exit(main())
