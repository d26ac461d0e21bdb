"""dpsmooth-spark: differentially private synthetic copies of continuous tables on Spark."""

__version__ = "0.1.0"
