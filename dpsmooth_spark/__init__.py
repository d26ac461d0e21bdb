"""dpsmooth-spark: differentially private synthetic copies of lake tables on Spark.

The library API: ``from dpsmooth_spark import Synthesizer, ColumnConfig, SynthesizerParams``.
They load on first use, so the executors, which import only the data-pass kernel, need numpy
and pyarrow alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["ColumnConfig", "Synthesizer", "SynthesizerParams", "__version__"]

if TYPE_CHECKING:
    from dpsmooth_spark.config import ColumnConfig
    from dpsmooth_spark.mechanisms.synthesizer.params import SynthesizerParams
    from dpsmooth_spark.pipeline.in_memory import Synthesizer

_EXPORTS = {
    "ColumnConfig": "dpsmooth_spark.config",
    "Synthesizer": "dpsmooth_spark.pipeline.in_memory",
    "SynthesizerParams": "dpsmooth_spark.mechanisms.synthesizer.params",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'dpsmooth_spark' has no attribute {name!r}")
