"""`python -m rgpu ...` is the `rgpu` command."""

import sys

from rgpu.cli import main

sys.exit(main())
