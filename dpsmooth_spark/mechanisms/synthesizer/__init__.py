"""The synthesize mechanism: Wang et al. (2016) Section 5.2, fitted for faithful tables.

Its stages, each a pure function over numpy with the accountant passed in:

* :mod:`.plan`: the budget plan, from public values and the noisy count;
* :mod:`.measure`: the DP statistics (count, histograms, Chebyshev basis sums and pairs on spread
  factors, selected pairs, PSI and the spread along its directions), each a
  :class:`NoisyStatistic` record of a :class:`NoisySummary` (:mod:`.summary`: the records, what
  they imply, their JSON codecs, and :func:`measurements` over them for the fit);
* :mod:`.candidates`: support points from the private marginals and correlation, with the
  independent-columns prior over them;
* :mod:`.fit`: the closest fit, then the maximum-entropy projection (or the paper's LP);
* :mod:`.sample`: records from the fitted weights, decoded to the input's types.

:mod:`.arrays` wires them for numeric arrays; ``pipeline.in_memory`` for in-memory tables and
``pipeline.synthesize`` for Spark.
"""

from dpsmooth_spark.mechanisms.synthesizer.arrays import (
    ArraySynthesizer,
    fit_from_sums,
    rows_pass_over,
)
from dpsmooth_spark.mechanisms.synthesizer.fit import SynthesisResult, fit_from_summary
from dpsmooth_spark.mechanisms.synthesizer.measure import release_summary
from dpsmooth_spark.mechanisms.synthesizer.params import SynthesizerParams, choose_basis
from dpsmooth_spark.mechanisms.synthesizer.sample import default_rows, sample_scaled, sample_table
from dpsmooth_spark.mechanisms.synthesizer.summary import (
    Measurement,
    NoisyStatistic,
    NoisySummary,
    measurements,
)

__all__ = [
    "Measurement",
    "NoisyStatistic",
    "NoisySummary",
    "SynthesizerParams",
    "ArraySynthesizer",
    "SynthesisResult",
    "choose_basis",
    "fit_from_summary",
    "fit_from_sums",
    "measurements",
    "release_summary",
    "rows_pass_over",
    "default_rows",
    "sample_scaled",
    "sample_table",
]
