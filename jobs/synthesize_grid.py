"""spark-submit entry point: ``spark-submit jobs/synthesize_grid.py --config FILE`` (Algorithm
3)."""

import sys

from dpsmooth_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["synthesize-grid", *sys.argv[1:]]))
