"""`python -m lucepatch` == the `lucepatch` console script."""

import sys

from lucepatch.main import main

sys.exit(main())
