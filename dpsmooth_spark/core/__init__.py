"""Pure numpy/scipy building blocks: no Spark, no privacy accounting."""
