"""The synthesize mechanism: Wang et al. (2016) Section 5.2, fitted for faithful tables.

Its stages, one module each, every one a pure function over numpy with the accountant passed in:

* :mod:`.measure`: the DP statistics (count, histograms, Chebyshev basis sums and pairs on spread
  factors, selected pairs, PSI and the spread along its directions) as a :class:`NoisySummary`
  (:mod:`.summary`: the statistics as data, what they imply, and :func:`measurements` over them
  for the fit);
* :mod:`.candidates`: support points from the private marginals and correlation, with the
  independent-columns prior over them;
* :mod:`.fit`: the reduced LP (OR-Tools), then the maximum-entropy projection;
* :mod:`.sample`: records from the fitted weights.

:mod:`.synthesizer` wires them for in-memory tables; ``pipeline.synthesize`` for Spark.
"""

from dpsmooth_spark.mechanisms.synthesizer.arrays import ArraySynthesizer, fit_from_sums
from dpsmooth_spark.mechanisms.synthesizer.fit import SynthesisResult, fit_from_summary
from dpsmooth_spark.mechanisms.synthesizer.measure import release_summary
from dpsmooth_spark.mechanisms.synthesizer.params import SynthesizerParams, choose_basis
from dpsmooth_spark.mechanisms.synthesizer.sample import sample_scaled
from dpsmooth_spark.mechanisms.synthesizer.summary import Measurement, NoisySummary, measurements

__all__ = [
    "Measurement",
    "NoisySummary",
    "SynthesizerParams",
    "ArraySynthesizer",
    "SynthesisResult",
    "choose_basis",
    "fit_from_summary",
    "fit_from_sums",
    "measurements",
    "release_summary",
    "sample_scaled",
]
