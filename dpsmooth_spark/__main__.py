"""``python -m dpsmooth_spark``."""

import sys

from dpsmooth_spark.cli import main

sys.exit(main())
