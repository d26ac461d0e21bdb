"""Fidelity of releases on several tables against simple baselines (issue 12's benchmark).

    python -m benchmarks fidelity [--tables wdbc,wine] [--epsilons 0.1,1,10] [--releases 2]

Per table, epsilon, method and release (secure noise): the three numbers that
``../shared/tools/fidelity.py`` prints (correlation error over that of independent columns,
values on a bound minus the real share, Wasserstein-1 over a DP independent-histogram
baseline), the train-on-synthetic / test-on-real AUC of a logistic regression for the table's
label, the paper's worst relative Gaussian-kernel query error (``--queries`` queries per sigma)
and the seconds the release took. Methods: ``ours`` (the synthesize mechanism in memory, default
parameters, the 0/1 label declared as two levels and an anchor column, as in the example
configs; ``ours_zcdp``: the same at ``(epsilon, 1e-9)`` in the Gaussian zCDP mode, the guarantee
MST and AIM give), ``independent`` (per-column Laplace histograms, epsilon / d each) and
``uniform``.
Writes ``benchmarks/fidelity.json``; ``docs/results.md`` has the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.tables import ROOT, TABLES
from dpsmooth_spark.core.bounds import PublicBounds
from dpsmooth_spark.evaluation.baselines import independent_laplace, uniform_rows
from dpsmooth_spark.evaluation.queries import PAPER_SIGMAS, GaussianMixtureQueries, answer_errors
from dpsmooth_spark.mechanisms.synthesizer import ArraySynthesizer, SynthesizerParams
from dpsmooth_spark.privacy.noise import NoiseSource

METHODS = ("ours", "ours_zcdp", "independent", "uniform", "mst", "aim")
PEER_DELTA = 1e-9
"""The delta of smartnoise-synth's MST and AIM (their default, accounted in zCDP): ``ours_zcdp``
runs our mechanism at the same ``(epsilon, delta)`` guarantee, in its Gaussian zCDP mode."""
DEFAULT_TOOL = ROOT.parent / "shared" / "tools" / "fidelity.py"
PEERS_PYTHON = ROOT / ".venv-peers" / "bin" / "python"


def run_peer(script: str, args: list[str], timeout: float) -> bool:
    """Run ``benchmarks/<script>`` in the peers environment; ``False`` when it ran out of time."""
    try:
        subprocess.run(
            [str(PEERS_PYTHON), str(ROOT / "benchmarks" / script), *args],
            check=True,
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return False
    return True


def peer_release(
    method: str,
    data: np.ndarray,
    bounds: PublicBounds,
    epsilon: float,
    seed: int,
    timeout: float,
    options: tuple[str, ...] = (),
) -> np.ndarray | None:
    """A smartnoise-synth release in the peers environment (``options``: more arguments of
    ``peers.py``); ``None`` when it ran out of time."""
    with tempfile.TemporaryDirectory() as tmp:
        real, spec, out = (
            Path(tmp) / name for name in ("real.parquet", "bounds.json", "out.parquet")
        )
        pq.write_table(pa.table({c: data[:, i] for i, c in enumerate(bounds.columns)}), real)
        spec.write_text(
            json.dumps(
                {
                    c: [float(lo), float(hi)]
                    for c, lo, hi in zip(bounds.columns, bounds.lower, bounds.upper, strict=False)
                }
            )
        )
        args = [method, str(epsilon), str(real), str(spec), str(out), "--seed", str(seed)]
        if not run_peer("peers.py", [*args, *options], timeout):
            return None
        table = pq.read_table(out)
        return np.column_stack([table[c].to_numpy() for c in bounds.columns])


def release(
    method: str,
    data: np.ndarray,
    bounds: PublicBounds,
    epsilon: float,
    params: dict,
    rng: np.random.Generator,
    label: str | None = None,
    seed: int | None = None,
) -> np.ndarray:
    """Synthetic rows in original units (as many as the real table has); ``params`` are
    :class:`SynthesizerParams` for ``ours`` and ``ours_zcdp`` (at ``(epsilon, PEER_DELTA)``), which
    declare the 0/1 ``label`` a column of two levels (as the example configs declare
    ``values: [0, 1]``); ``seed``: seeded noise (``benchmarks check``), else secure."""
    n, d = data.shape
    if method in ("ours", "ours_zcdp"):
        delta = PEER_DELTA if method == "ours_zcdp" else 0.0
        synth = ArraySynthesizer(
            epsilon,
            dict(zip(bounds.columns, zip(bounds.lower, bounds.upper, strict=False), strict=False)),
            delta=delta,
            params=SynthesizerParams(**params),
            levels={label: 2} if label else None,
            random_state=seed,
        )
        out = synth.fit({c: data[:, i] for i, c in enumerate(bounds.columns)}).sample(n)
        return np.column_stack([out[c] for c in bounds.columns])
    if method == "independent":
        return bounds.unscale(
            independent_laplace(bounds.scale(data), epsilon, n, rng, NoiseSource())
        )
    return bounds.unscale(uniform_rows(d, n, rng))


def fidelity_numbers(
    tool: Path, real: np.ndarray, synthetic: np.ndarray, bounds: PublicBounds, epsilon: float
) -> dict:
    """Run the shared fidelity tool on the two tables written as Parquet."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, rows in (("real", real), ("synthetic", synthetic)):
            path = Path(tmp) / f"{name}.parquet"
            pq.write_table(pa.table({c: rows[:, i] for i, c in enumerate(bounds.columns)}), path)
            paths.append(str(path))
        spec = ";".join(
            f"{float(lo)!r},{float(hi)!r}"
            for lo, hi in zip(bounds.lower, bounds.upper, strict=False)
        )
        out = subprocess.run(
            [
                sys.executable,
                str(tool),
                *paths,
                f"--bounds={spec}",
                "--epsilon",
                str(epsilon),
                "--columns",
                ",".join(bounds.columns),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout)


def train_on_synthetic_auc(real: np.ndarray, synthetic: np.ndarray, label: int) -> float:
    """AUC on the real rows of a logistic regression trained on the synthetic rows."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y_syn = synthetic[:, label] >= 0.5
    if y_syn.all() or not y_syn.any():
        return 0.5
    feats = [i for i in range(real.shape[1]) if i != label]
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(synthetic[:, feats], y_syn)
    return float(roc_auc_score(real[:, label] >= 0.5, model.decision_function(real[:, feats])))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks fidelity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--tables", default=",".join(TABLES))
    ap.add_argument("--epsilons", default="0.1,1,10")
    ap.add_argument("--methods", default="ours,independent,uniform")
    ap.add_argument("--peer-timeout", type=float, default=900.0, help="seconds per MST/AIM release")
    ap.add_argument("--releases", type=int, default=2)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument(
        "--params", type=json.loads, default={}, help="SynthesizerParams overrides (JSON)"
    )
    ap.add_argument(
        "--tool", type=Path, default=DEFAULT_TOOL, help="path of shared/tools/fidelity.py"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "fidelity.json")
    ap.add_argument("--markdown", type=Path, help="only print the Markdown table of a results file")
    args = ap.parse_args(argv)
    unknown = set(args.methods.split(",")) - set(METHODS)
    if unknown:
        raise SystemExit(f"unknown methods {sorted(unknown)}; choose from {', '.join(METHODS)}")
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())["runs"]))
        return
    if not args.tool.exists():
        raise SystemExit(f"fidelity tool not found at {args.tool}; pass --tool")
    runs = []
    for table in args.tables.split(","):
        data, mapping, label_name = TABLES[table]()
        bounds = PublicBounds.from_mapping(mapping)
        label = bounds.columns.index(label_name)
        features = [i for i in range(bounds.d) if i != label]
        queries = GaussianMixtureQueries.draw(
            len(features), args.queries, np.random.default_rng(2016)
        )
        truth = queries.answers(bounds.scale(data)[:, features], PAPER_SIGMAS)
        for eps in map(float, args.epsilons.split(",")):
            for method in args.methods.split(","):
                for rep in range(args.releases):
                    start = time.perf_counter()
                    params = {"pair_columns": [label_name], **args.params}  # as the example configs
                    if method in ("mst", "aim"):
                        found = peer_release(method, data, bounds, eps, rep, args.peer_timeout)
                        if found is None:
                            runs.append(
                                {
                                    "table": table,
                                    "epsilon": eps,
                                    "method": method,
                                    "release": rep,
                                    "timeout_s": args.peer_timeout,
                                }
                            )
                            print(json.dumps(runs[-1]), flush=True)
                            continue
                        syn = found
                    else:
                        syn = release(
                            method,
                            data,
                            bounds,
                            eps,
                            params,
                            np.random.default_rng(rep),
                            label_name,
                        )
                    seconds = time.perf_counter() - start
                    answers = queries.answers(bounds.scale(syn)[:, features], PAPER_SIGMAS)
                    run = {
                        "table": table,
                        "rows": len(data),
                        "columns": bounds.d,
                        "epsilon": eps,
                        "method": method,
                        **({"params": args.params} if args.params else {}),
                        "release": rep,
                        "seconds": round(seconds, 2),
                        **fidelity_numbers(args.tool, data, syn, bounds, eps),
                        "auc": round(train_on_synthetic_auc(data, syn, label), 3),
                        "worst_rel": [
                            round(float(v), 4) for v in answer_errors(truth, answers)["worst_rel"]
                        ],
                    }
                    runs.append(run)
                    print(json.dumps(run), flush=True)
    args.out.write_text(
        json.dumps(
            {
                "command": "python -m benchmarks fidelity " + " ".join(argv or sys.argv[2:]),
                "sigmas": PAPER_SIGMAS,
                "runs": runs,
            },
            indent=1,
        )
        + "\n"
    )
    print(markdown(runs))


def method_label(run: dict) -> str:
    """The method of a run, with its ``--params`` overrides if any (``ours_zcdp basis=pairs``)."""
    overrides = run.get("params") or {}
    return " ".join([run["method"], *(f"{k}={v}" for k, v in overrides.items())])


def markdown(runs: list[dict]) -> str:
    """The mean of each metric per (table, epsilon, method and overrides) as a Markdown table."""

    def order(key: tuple) -> tuple:
        method = key[2].split()[0]
        return key[0], key[1], METHODS.index(method) if method in METHODS else len(METHODS), key[2]

    keys = sorted({(r["table"], r["epsilon"], method_label(r)) for r in runs}, key=order)
    header = (
        "| table | epsilon | method | corr ratio | bound excess (pp) | W1 ratio | AUC | "
        "worst rel, sigma 2 / 4 / 6 / 8 / 10 | seconds |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|---|"]
    for key in keys:
        sel = [r for r in runs if (r["table"], r["epsilon"], method_label(r)) == key and "auc" in r]
        if not sel:
            lines.append(f"| {key[0]} | {key[1]:g} | {key[2]} | timed out | | | | | |")
            continue
        mean = {
            k: float(np.mean([r[k] for r in sel]))
            for k in ("corr_ratio", "bound_excess_pp", "w1_ratio", "auc", "seconds")
        }
        rel = " / ".join(f"{v:.3f}" for v in np.mean([r["worst_rel"] for r in sel], axis=0))
        lines.append(
            f"| {key[0]} | {key[1]:g} | {key[2]} | {mean['corr_ratio']:.2f} | "
            f"{mean['bound_excess_pp']:.1f} | {mean['w1_ratio']:.2f} | {mean['auc']:.2f} | "
            f"{rel} | {mean['seconds']:.1f} |"
        )
    return "\n".join(lines)
