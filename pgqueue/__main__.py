"""``python -m pgqueue`` is the ``pgqueue`` command."""

import sys

from pgqueue.cli import main

sys.exit(main())
