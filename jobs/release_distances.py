"""spark-submit entry point: ``spark-submit jobs/release_distances.py --config FILE``."""

import sys

from dpsmooth_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["release-distances", *sys.argv[1:]]))
