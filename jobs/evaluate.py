"""spark-submit entry point: ``spark-submit jobs/evaluate.py --config FILE --synthetic PATH --out
DIR``."""

import sys

from dpsmooth_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate", *sys.argv[1:]]))
