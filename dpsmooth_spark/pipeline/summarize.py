"""The summarize job (Algorithm 1): the noisy tensor-basis summary of a table, written
atomically."""

from __future__ import annotations

from dpsmooth_spark.config import ReleaseConfig
from dpsmooth_spark.core.kernel import PassSpec
from dpsmooth_spark.mechanisms.smooth_summary import (
    SmoothSummary,
    pass_degree,
    release_tensor_summary,
)
from dpsmooth_spark.pipeline.release import ReleaseReport, ReleaseRun

MECHANISM = "smooth_summary"


def run_summarize(config: ReleaseConfig, quiet: bool = False) -> ReleaseReport:
    """Release the summary of Algorithm 1; answer queries from it with ``answer``."""
    params = config.summary
    t_pass = pass_degree(
        params, len(config.columns), config.privacy.delta
    )  # refuses huge t^d early
    run = ReleaseRun.start(config, MECHANISM, quiet)
    if run.previous is None:
        with run.charged():
            sums = run.exact_sums(PassSpec(degree=1, tensor_degree=t_pass))
            accountant = run.new_accountant()
            with run.log.stage("noise"):
                summary = release_tensor_summary(sums, run.bounds, params, accountant, run.noise)
                run.persist(accountant, summary.to_dict())
    else:
        summary = SmoothSummary.from_dict(run.previous.statistics)
        accountant = run.reused_accountant()
    run.log.note(
        f"degree t = {summary.degree} per axis: {summary.degree**run.bounds.d - 1} noisy sums"
    )
    mechanism = {
        "reference": "Wang et al., Differentially Private Data Releasing for Smooth Queries, "
        "JMLR 2016, Algorithm 1 (Section 5.1 in the (epsilon, delta) mode)",
        "parameters": params.model_dump(mode="json"),
        "degree": summary.degree,
        "functions": summary.degree**run.bounds.d - 1,
    }
    output = {"files": "summary.json (DP noisy summary), manifest.json"}
    manifest = run.manifest(accountant, mechanism, output, {})
    return run.write(None, {"summary.json": summary.to_dict()}, manifest)
