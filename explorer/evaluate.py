"""`python -m explorer.evaluate`: re-evaluates checkpoints (explorer.analysis.evaluate)."""

import sys

from explorer.analysis.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
