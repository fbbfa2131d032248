"""`python -m explorer.convert SOURCE [--out FOLDER] [--name NAME]`: see explorer/convert/__init__.py."""

import sys

from explorer.convert import main

sys.exit(main())
