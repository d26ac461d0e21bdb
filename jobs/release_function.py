"""spark-submit entry point: ``spark-submit jobs/release_function.py --config FILE``."""

import sys

from dpsmooth_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["release-function", *sys.argv[1:]]))
