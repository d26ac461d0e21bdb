"""The synthesize job: exact data pass, DP statistics, candidates and LP, sampling, atomic write.

The budget is checked before Spark starts, and the noisy statistics are written to the ledger
before anything reads them, so a re-run with the same release id reuses them (only
post-processing is redone) instead of spending budget again.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa

from dpsmooth_spark.config import UNIT_ROWS_COLUMN, ConfigError, ReleaseConfig
from dpsmooth_spark.core.columns import TableCodec
from dpsmooth_spark.core.sampling import herds
from dpsmooth_spark.evaluation.metrics import distinct_rows
from dpsmooth_spark.mechanisms import adaptive, persons, records
from dpsmooth_spark.mechanisms.synthesizer import (
    NoisySummary,
    SynthesizerParams,
    default_rows,
    fit_from_summary,
    release_summary,
    sample_table,
)
from dpsmooth_spark.mechanisms.synthesizer.plan import check_fractions
from dpsmooth_spark.mechanisms.synthesizer.summary import modelled_pairs
from dpsmooth_spark.pipeline.release import ReleaseReport, ReleaseRun
from dpsmooth_spark.pipeline.row_checks import InvalidDataError
from dpsmooth_spark.spark import io

MECHANISM = "smooth_pca"
ADAPTIVE = "adaptive_marginals"
PERSONS = "adaptive_persons"
EXECUTOR_SAMPLING_ROWS = 1_000_000
"""Above this many rows ``output.sampling: auto`` draws them in the executors."""

__all__ = ["MECHANISM", "InvalidDataError", "ReleaseReport", "run_synthesize"]


def run_synthesize(config: ReleaseConfig, quiet: bool = False) -> ReleaseReport:
    """Run a full release described by ``config``; see ``docs/privacy.md`` for the guarantee."""
    params = config.mechanism
    if config.persons:
        return _run_persons(config, quiet)
    if params.method == "adaptive":
        return _run_adaptive(config, quiet)
    run = ReleaseRun.start(config, MECHANISM, quiet, lambda codec: _check_plan(params, codec))
    nullable = run.codec.null_columns
    if run.previous is None:
        with run.charged():
            sums = run.exact_sums(
                replace(
                    params.pass_spec(run.bounds.d, run.codec.lattice(), run.codec.nominal()),
                    null_cells=bool(nullable.any()),
                )
            )
            accountant = run.new_accountant()
            with run.log.stage("noise and private PCA"):
                summary = release_summary(
                    sums,
                    run.bounds,
                    params,
                    accountant,
                    run.noise,
                    run.rng,
                    nullable,
                    run.codec.lattice(),
                    run.codec.nominal(),
                    run.rows_pass,
                )
                run.persist(accountant, summary.to_dict())
    else:
        summary = NoisySummary.from_dict(run.previous.statistics)
        if summary.levels is None:  # a summary persisted without its levels
            summary = replace(summary, levels=run.codec.lattice())
        if summary.nominal is None:  # or without its categories
            summary = replace(summary, nominal=run.codec.nominal())
        accountant = run.reused_accountant()

    with run.log.stage("candidates and fit"):
        result = fit_from_summary(summary, params, run.rng)
    run.log.note(
        f"basis: {summary.functions} functions; candidates: {result.candidates.shape[0]}; "
        f"effective support: {result.support_size}; chi2 {result.chi2:.1f} for "
        f"{result.functions} functions; PSI: {'yes' if summary.pca else 'no'}"
    )

    null_shares = summary.null_shares()
    rows = config.output.rows or default_rows(summary)
    on_executors = config.output.sampling == "executors" or (
        config.output.sampling == "auto" and rows > EXECUTOR_SAMPLING_ROWS
    )
    data: pa.Table | io.DataWriter
    if on_executors:
        partitions = config.output.partitions or max(1, -(-rows // 1_000_000))
        data = io.sample_on_executors(
            run.spark(),
            result.candidates,
            result.weights,
            result.jitter,
            run.codec,
            rows,
            int(run.rng.integers(2**62)),
            partitions,
            null_shares if nullable.any() else None,
            # lake formats stage unpartitioned rows; their commit partitions
            config.output.partition_by if config.output.format == "parquet" else None,
            independent=result.independent,
            rare=tuple(
                (g.column, g.levels, g.representative, g.group, g.shares) for g in result.rare
            ),
            atoms=result.atoms,
            copula=result.copula,
        )
        distinct: int | None = None
    else:
        with run.log.stage("sampling"):
            data, scaled = sample_table(result, rows, run.rng, params.herding_rows, run.codec)
            distinct = distinct_rows(scaled)

    mechanism = {
        "reference": "Wang et al., Differentially Private Data Releasing for Smooth Queries, "
        "JMLR 2016, Section 5.2 (Algorithms 3 and 4); maximum-entropy fit "
        "(docs/mechanisms.md)",
        "parameters": params.model_dump(mode="json"),
        "basis": {
            "size": summary.functions,
            "max_degree": summary.basis.degree,
            "pair_terms": bool(((summary.basis.indices != 0).sum(axis=1) == 2).any())
            or summary.factor_pairs is not None,
            "pairs_on_spread_factors": 0
            if summary.factor_pairs is None
            else summary.factor_pairs.size,
            "spread_columns": []
            if summary.factor_pairs is None
            else [
                name
                for name, spread in zip(
                    run.bounds.columns, summary.factor_pairs.spread, strict=False
                )
                if spread
            ],
        },
        "candidate_strategy": "psi" if summary.pca is not None else "moments",
        "budget_plan": summary.plan,
        "candidates": int(result.candidates.shape[0]),
        "null_shares": {
            name: float(p)
            for name, p, on in zip(run.bounds.columns, null_shares, nullable, strict=False)
            if on
        },
        "reference_fit": "closest chi-square" if params.fit == "maxent" else "reduced LP",
        "reference_objective_l1": result.reference_objective,
        "fit": {
            "method": params.fit,
            "objective_l1": result.fit_objective,
            "chi2": result.chi2,
            "functions": result.functions,
            "kl_to_independent_prior": result.kl,
            "effective_support": result.support_size,
            "pairs_low_rank": _low_rank_pairs(result.summary, params),
            "quadrant_pairs": _quadrant_pairs(result.summary),
        },
    }
    output = {
        "rows": rows,
        "distinct_rows": distinct,
        "sampled_on": "executors" if on_executors else "driver",
        "candidates_picked_by": "kernel herding"
        if not on_executors and herds(rows, params.herding_rows, result.summary.levels)
        else "systematic resampling",
        "files": "data/*.parquet, summary.json (DP noisy summary), manifest.json",
    }
    manifest = run.manifest(accountant, mechanism, output, result.timings)
    return run.write(data, {"summary.json": summary.to_dict()}, manifest)


def _run_adaptive(config: ReleaseConfig, quiet: bool) -> ReleaseReport:
    """The adaptive mechanism's release: one data pass counts every candidate marginal, the loop
    spends the budget on them (``mechanisms/adaptive.py``), records come from its model."""
    params = config.mechanism
    run = ReleaseRun.start(config, ADAPTIVE, quiet)
    names = [c.name for c in config.columns]
    settings = adaptive.LoopSettings.named(params.rounds, names, params.pair_columns)
    coding = records.cell_coding(run.codec)
    if run.previous is None:
        with run.charged():
            spec = records.pass_spec(coding, settings)
            sums = run.exact_sums(spec)
            accountant = run.new_accountant()
            with run.log.stage("select, measure, estimate"):
                result = records.release(sums, spec, accountant, run.noise, settings)
                run.persist(accountant, {**result.to_dict(), "columns": config.column_names})
    else:
        accountant = run.reused_accountant()
        with run.log.stage("estimate"):
            result = records.replay(run.previous.statistics, coding, settings)
    run.log.note(
        f"measured {len(result.measurements)} marginals ({len(result.selected)} picked); model "
        f"cliques: {len(result.model.tree.cliques)}"
    )
    rows = config.output.rows or max(1, round(result.total))
    on_executors = config.output.sampling == "executors" or (
        config.output.sampling == "auto" and rows > EXECUTOR_SAMPLING_ROWS
    )
    data: pa.Table | io.DataWriter
    if on_executors:
        data = io.draw_on_executors(
            run.spark(),
            records.record_sampler(result, coding),
            run.codec,
            rows,
            int(run.rng.integers(2**62)),
            config.output.partitions or max(1, -(-rows // 1_000_000)),
            config.output.partition_by if config.output.format == "parquet" else None,
        )
    else:
        with run.log.stage("sampling"):
            data = records.sample_table(result, run.codec, rows, run.rng)
    mechanism = {
        "reference": "AIM (McKenna, Mullins, Sheldon, Miklau, VLDB 2022): marginals picked by "
        "the exponential mechanism, estimated by a graphical model (Private-PGM); "
        "docs/mechanisms.md",
        "parameters": {"method": "adaptive", "rounds": params.rounds},
        "cells": list(coding.sizes),
        "measured": [
            {"scope": [run.codec.names[v] for v in m.scope], "round": m.round, "noise_std": m.std}
            for m in result.measurements
        ],
        "model_cliques": [[run.codec.names[v] for v in c] for c in result.model.tree.cliques],
    }
    output = {
        "rows": rows,
        "sampled_on": "executors" if on_executors else "driver",
        "files": "data/*.parquet, summary.json (DP measurements), manifest.json",
    }
    manifest = run.manifest(accountant, mechanism, output, {})
    return run.write(data, {"summary.json": result.to_dict()}, manifest)


def _run_persons(config: ReleaseConfig, quiet: bool) -> ReleaseReport:
    """A release of persons: one pass over the kept rows grouped by unit counts the loop's
    tables (``mechanisms/persons.py``), and the model draws units, each with its rows."""
    params, unit = config.mechanism, config.privacy.unit
    assert unit is not None
    settings = adaptive.LoopSettings(rounds=params.rounds)
    per_unit = tuple(c.per_unit for c in config.columns)
    spec_of = lambda codec: persons.unit_tables(  # noqa: E731
        records.cell_coding(codec), per_unit, config.privacy.unit_rows, settings
    )
    run = ReleaseRun.start(config, PERSONS, quiet, lambda codec: _check_persons(spec_of, codec))
    spec = spec_of(run.codec)
    if run.previous is None:
        with run.charged():
            counts = run.unit_pass(spec)
            accountant = run.new_accountant()
            with run.log.stage("select, measure, estimate"):
                result, tables = persons.release(counts, spec, accountant, run.noise, settings)
                run.persist(accountant, {**result.to_dict(), "columns": config.column_names})
    else:
        accountant = run.reused_accountant()
        with run.log.stage("estimate"):
            result, tables = persons.replay(run.previous.statistics, spec, settings)
    noisy_units = persons.units_released(result, tables)
    units = config.output.units or noisy_units
    lambdas = tables.agreements(result.model, result.total)
    rows = round(units * result.total / noisy_units)  # expected: each unit draws its rows
    on_executors = config.output.sampling == "executors" or (
        config.output.sampling == "auto" and rows > EXECUTOR_SAMPLING_ROWS
    )
    prefix = f"{int(run.rng.integers(2**32)):08x}"
    names = [*run.codec.names]
    unit_columns = [n for n, on in zip(names, per_unit, strict=True) if on]
    data: pa.Table | io.DataWriter
    units_table: pa.Table | io.UnitsWriter | None = None
    if on_executors:
        partitions = config.output.partitions or max(1, -(-rows // 1_000_000))
        shares = np.full(partitions, units // partitions)
        shares[: units % partitions] += 1
        starts = np.r_[0, np.cumsum(shares)[:-1]]
        codec, drawn = run.codec, persons.PersonTables(spec, {}, settings.max_way)

        def draw(p: int, rng: np.random.Generator) -> pa.Table:
            return persons.persons_table(
                result,
                drawn,
                lambdas,
                codec,
                int(shares[p]),
                rng,
                unit,
                int(starts[p]),
                prefix,
            )

        schema = pa.schema([pa.field(unit, pa.string()), *run.codec.schema()])
        if config.output.units_table:
            units_table = io.units_on_executors(
                run.spark(),
                schema,
                unit,
                unit_columns,
                UNIT_ROWS_COLUMN,
                config.output.partition_by,
            )
        data = io.tables_on_executors(
            run.spark(),
            draw,
            schema,
            int(run.rng.integers(2**62)),
            partitions,
            config.output.partition_by if config.output.format == "parquet" else None,
        )
    else:
        with run.log.stage("sampling"):
            data = persons.persons_table(
                result, tables, lambdas, run.codec, units, run.rng, unit, 0, prefix
            )
            rows = data.num_rows
            if config.output.units_table:
                units_table = persons.unit_table(data, unit, unit_columns, UNIT_ROWS_COLUMN)
    mechanism = {
        "reference": "AIM (McKenna, Mullins, Sheldon, Miklau, VLDB 2022) over the rows, the "
        "units and the agreement of a unit's rows; docs/mechanisms.md (synthetic persons)",
        "parameters": {"method": "adaptive", "rounds": params.rounds},
        "cells": list(spec.sizes),
        "per_unit_columns": unit_columns,
        "measured": [
            {
                "kind": m.kind,
                "scope": [_variable(names, unit, v) for v in m.scope],
                "round": m.round,
                "noise_std": m.std,
            }
            for m in result.measurements
        ],
        "within_unit_agreement": {
            names[j]: float(lambdas[j]) for j in spec.pair_columns if lambdas[j] > 0
        },
        "model_cliques": [
            [_variable(names, unit, v) for v in c] for c in result.model.tree.cliques
        ],
    }
    output: dict[str, Any] = {
        "units": units,
        "rows" if not on_executors else "rows_expected": rows,
        "unit_column": unit,
        "unit_ids": f"fresh strings '{prefix}-<n>', n from 0 to units - 1 (never a real id)",
        "sampled_on": "executors" if on_executors else "driver",
        "files": f"data/*.parquet, {'units/*.parquet, ' if config.output.units_table else ''}"
        "summary.json (DP measurements), manifest.json",
    }
    if config.output.units_table:
        output["units_table"] = {
            "path": "units/",
            "columns": [unit, *unit_columns, UNIT_ROWS_COLUMN],
            "relation": f"one row per unit of data/, joined on {unit!r}: its per-unit columns "
            f"and {UNIT_ROWS_COLUMN!r}, its rows in data/ (a function of data/: no budget)",
        }
    manifest = run.manifest(accountant, mechanism, output, {})
    return run.write(data, {"summary.json": result.to_dict()}, manifest, units_table)


def _variable(names: list[str], unit: str, v: int) -> str:
    """A model variable's name: a released column, or the rows its unit kept."""
    return names[v] if v < len(names) else f"rows per {unit}"


def _check_persons(spec_of: Any, codec: TableCodec) -> None:
    """A release of persons' refusals that the config alone decides, before any noise."""
    try:
        spec_of(codec)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_plan(params: SynthesizerParams, codec: TableCodec) -> None:
    """The plan's refusals that the config alone decides (:func:`check_fractions`), before any
    noise; ``codec`` has the auto domains stood in, which keeps each column's kind."""
    spec = params.pass_spec(len(codec.columns), codec.lattice(), codec.nominal())
    check_fractions(params, spec.tables is not None and spec.tables.size > 0)


def _low_rank_pairs(
    summary: NoisySummary, params: SynthesizerParams
) -> dict[str, float | int] | None:
    """What the manifest says of the pairs' low-rank model where the fit reads the pairs through
    it (:meth:`core.low_rank.LowRankCovariance.describe`); ``None`` where the fit reads the
    pairs as measured."""
    modelled = modelled_pairs(summary, params)
    return None if modelled is None else modelled.model.describe()


def _quadrant_pairs(summary: NoisySummary) -> dict[str, int] | None:
    """What the manifest says of the quadrant pairs where they were measured: how many, and how
    many clear their threshold and shape the copula (:meth:`NoisySummary.quadrant_relations`)."""
    quadrants = summary.quadrant_pairs
    if quadrants is None:
        return None
    related = int(summary.quadrant_relations().sum())
    return {"measured": int(quadrants.query.size), "related": related}
