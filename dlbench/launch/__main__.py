"""`python -m dlbench.launch`: the launcher, and every rank it starts."""

import sys

from dlbench.launch.run import main

sys.exit(main())
