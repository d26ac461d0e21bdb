"""The benchmarks package: ``python -m benchmarks COMMAND`` (see ``docs/results.md``)."""
