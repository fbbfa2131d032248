"""`python -m explorer.finetune --serve` (the worker process the app starts) or `python -m explorer.finetune
JOB_DIR` (one job, then exit): see explorer/finetune/serve.py."""

import sys

from explorer.finetune.serve import main

sys.exit(main())
