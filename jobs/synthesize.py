"""spark-submit entry point: ``spark-submit jobs/synthesize.py --config FILE``.

The same pipeline as ``python -m dpsmooth_spark synthesize``; under spark-submit the submitted
master and settings are used instead of the config's ``spark`` section.
"""

import sys

from dpsmooth_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(["synthesize", *sys.argv[1:]]))
