"""spark-submit entry point: ``spark-submit jobs/summarize.py --config FILE`` (Algorithm 1)."""

import sys

from dpsmooth_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["summarize", *sys.argv[1:]]))
