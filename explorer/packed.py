"""`python -m explorer.packed`: packs CIFAR into one file (explorer.data.packed)."""

import sys

from explorer.data.packed import main

if __name__ == "__main__":
    sys.exit(main())
