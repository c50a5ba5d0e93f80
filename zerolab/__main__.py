"""`python -m zerolab` is the `zerolab` command."""

import sys

from zerolab.cli import main

sys.exit(main())
