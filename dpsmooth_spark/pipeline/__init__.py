"""Job wiring: stages, progress, manifest. Pipelines call mechanisms and the Spark adapters."""
