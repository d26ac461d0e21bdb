"""Fidelity of releases on wide tables (100-300 columns) against independent columns and MST.

    python -m benchmarks wide [--tables factors100,factors300,independent100]
        [--epsilons 0.1,1] [--methods ours,ours_zcdp,independent,mst,mst_sample]
        [--releases 2] [--out benchmarks/wide.json] [--append]

Tables (generated, 10^5 rows, bounds +-3 public): ``factorsD``: D columns in blocks of ten, each
block loading on one factor (loadings ``sqrt(U(0.35, 0.9))``, within-block correlations
0.35-0.9, none across blocks), clipped to the bounds; ``independent100``: 100 independent
standard normals, clipped. Methods: ``ours`` (the synthesize mechanism's defaults, pure
epsilon-DP), ``ours_zcdp`` (the same at ``(epsilon, 1e-6)``, MST's setting here;
``ours_zcdp_measured``: with ``pair_denoise: off``, the pairs read as measured), ``adaptive``
(``mechanism.method: adaptive``, pure epsilon-DP; its runs record the loop's picks),
``independent`` (per-column Laplace histograms at epsilon / d), ``mst`` and ``mst_sample``
(smartnoise-synth MST at ``(epsilon, 1e-6)``, 10 cells per column, its default randomized
rounding and i.i.d. sampling; ``--peer-timeout`` seconds each). Each run: the numbers of
``../shared/tools/fidelity.py``, seconds, and for ours the functions measured and the pairs'
low-rank model (rank, misfit) where the fit reads the pairs through it. Writes
``benchmarks/wide.json`` (``--append`` adds to it); ``docs/results.md`` has the table.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.fidelity import DEFAULT_TOOL, fidelity_numbers, peer_release, release
from benchmarks.tables import ROOT
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, SynthesizerParams
from dpsmooth_spark.mechanisms.synthesizer.summary import modelled_pairs

ROWS = 100_000
BOUND = 3.0
PEER_DELTA = 1e-6
PEER_CELLS = 10
METHODS = (
    "ours",
    "ours_zcdp",
    "ours_zcdp_measured",
    "adaptive",
    "independent",
    "mst",
    "mst_sample",
)


def factor_table(columns: int, rows: int = ROWS, width: int = 10, seed: int = 0) -> np.ndarray:
    """``columns`` columns in blocks of ``width``, each block loading on its own factor."""
    rng = np.random.default_rng(seed)
    out = np.empty((rows, columns))
    for start in range(0, columns, width):
        factor = rng.normal(size=rows)
        for j in range(start, min(start + width, columns)):
            load = rng.uniform(np.sqrt(0.35), np.sqrt(0.9))
            out[:, j] = load * factor + np.sqrt(1 - load**2) * rng.normal(size=rows)
    return np.clip(out, -BOUND, BOUND)


def independent_table(columns: int, rows: int = ROWS, seed: int = 0) -> np.ndarray:
    """``columns`` independent standard normals."""
    return np.clip(np.random.default_rng(seed).normal(size=(rows, columns)), -BOUND, BOUND)


TABLES: dict[str, Callable[[], np.ndarray]] = {
    "factors100": lambda: factor_table(100),
    "factors300": lambda: factor_table(300),
    "independent100": lambda: independent_table(100),
}


def ours(
    data: np.ndarray, bounds: PublicBounds, epsilon: float, delta: float, params: dict
) -> tuple:
    """Our release (defaults but ``params``) and what it measured."""
    mapping = {
        c: (float(lo), float(hi))
        for c, lo, hi in zip(bounds.columns, bounds.lower, bounds.upper, strict=True)
    }
    synth = ArraySynthesizer(epsilon, mapping, delta=delta, params=SynthesizerParams(**params))
    out = synth.fit({c: data[:, i] for i, c in enumerate(bounds.columns)}).sample(len(data))
    if synth.params.method == "adaptive":
        picks = len(synth.adaptive_.selected)
        return np.column_stack([out[c] for c in bounds.columns]), {"picks": picks}
    summary = synth.result_.summary
    modelled = modelled_pairs(summary, synth.params)
    info = {
        "functions": int(summary.functions),
        "low_rank": None if modelled is None else modelled.model.describe(),
    }
    return np.column_stack([out[c] for c in bounds.columns]), info


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tables", default="factors100,independent100")
    ap.add_argument("--epsilons", default="0.1,1")
    ap.add_argument("--methods", default="ours,ours_zcdp,independent")
    ap.add_argument("--releases", type=int, default=2)
    ap.add_argument("--peer-timeout", type=float, default=3600.0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "wide.json")
    ap.add_argument("--append", action="store_true", help="add the runs to --out's")
    args = ap.parse_args(argv)
    unknown = set(args.methods.split(",")) - set(METHODS)
    if unknown:
        raise SystemExit(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    kept = json.loads(args.out.read_text()) if args.append and args.out.exists() else {}
    runs = kept.get("runs", [])
    for table in args.tables.split(","):
        data = TABLES[table]()
        d = data.shape[1]
        bounds = PublicBounds.from_mapping({f"x{i}": (-BOUND, BOUND) for i in range(d)})
        for eps in map(float, args.epsilons.split(",")):
            for method in args.methods.split(","):
                releases = 1 if method.startswith("mst") else args.releases
                for rep in range(releases):
                    start = time.perf_counter()
                    info: dict = {}
                    syn: np.ndarray | None
                    if method == "adaptive":
                        syn, info = ours(data, bounds, eps, 0.0, {"method": "adaptive"})
                    elif method.startswith("ours"):
                        delta = 0.0 if method == "ours" else PEER_DELTA
                        params = {"pair_denoise": "off"} if method.endswith("measured") else {}
                        syn, info = ours(data, bounds, eps, delta, params)
                    elif method == "independent":
                        syn = release(method, data, bounds, eps, {}, np.random.default_rng(rep))
                    else:
                        sampling = "sample" if method == "mst_sample" else "round"
                        options = ["--bins", str(PEER_CELLS), "--delta", str(PEER_DELTA)]
                        options += ["--sampling", sampling]
                        syn = peer_release(
                            "mst", data, bounds, eps, 0, args.peer_timeout, tuple(options)
                        )
                    run = {"table": table, "columns": d, "epsilon": eps, "method": method}
                    run |= {"release": rep, "seconds": round(time.perf_counter() - start, 1)}
                    if syn is None:
                        run["timeout_s"] = args.peer_timeout
                    else:
                        run |= fidelity_numbers(DEFAULT_TOOL, data, syn, bounds, eps) | info
                    runs.append(run)
                    print(json.dumps(run), flush=True)
                    args.out.write_text(json.dumps({**kept, "runs": runs}, indent=1) + "\n")
    print(markdown(runs))


def markdown(runs: list[dict]) -> str:
    """Mean ``corr / W1 (releases)`` per table, epsilon and method."""
    cells: dict[tuple, list[dict]] = {}
    for run in runs:
        if "corr_ratio" in run:
            cells.setdefault((run["table"], run["epsilon"], run["method"]), []).append(run)
    lines = ["| table | epsilon | method | corr | W1 | seconds | releases |", "|---" * 7 + "|"]
    for (table, eps, method), found in sorted(cells.items()):
        mean = {k: np.mean([r[k] for r in found]) for k in ("corr_ratio", "w1_ratio", "seconds")}
        lines.append(
            f"| {table} | {eps:g} | {method} | {mean['corr_ratio']:.3f} | "
            f"{mean['w1_ratio']:.3f} | {mean['seconds']:.0f} | {len(found)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
