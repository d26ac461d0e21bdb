"""``python -m benchmarks mixed``: mixed tables scored as the MST / AIM papers score them.

Tables: the UCI Adult table as Private-PGM codes it (``../shared/data/adult.csv``: 8 categorical
columns declared with ``values: [0..k-1]``, 6 integer columns with ``lower: 0, upper: size-1``), a
generated mixed table with known relations (a category that moves a flag's rate and an age, a
spend with a spike at 0 that follows the flag, a nullable measure, a label) and a generated
table of independent columns. Per release: the mean total-variation distance of all 1-way, all
2-way and 200 random 3-way marginals (``../shared/tools/marginals.py``: integers in at most 16
cells), the same for its ``independent`` baseline (each column's Laplace histogram at
epsilon / d), train-on-synthetic AUC (gradient boosting trained on the synthetic rows, scored on
the real ones) and seconds. Methods: ``ours`` (the library, the defaults, pure epsilon),
``uniform`` rows, ``independent`` (the tool's baseline drawn again with the release's seed: the
tool draws it once, and one draw's 1-way TVD on Adult at 0.1 varies by 0.0022), and
smartnoise-synth's ``mst`` and ``aim`` in both of mbi's sampling modes (``mst`` / ``aim``:
randomized rounding, their default; ``mst_sample`` / ``aim_sample``: i.i.d. draws), run in
``.venv-peers`` (``scripts/peers_env``; ``benchmarks/peers_mixed.py``) with a time limit
(``--peer-timeout``); a run that does not finish is recorded as such.

Writes ``benchmarks/mixed.json``; docs/results.md has the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from benchmarks.fidelity import run_peer

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
CELLS = 16
"""The scorer's most cells for a bounded column (``shared/tools/marginals.py``)."""
CATEGORICAL = (
    "workclass marital-status occupation relationship race sex native-country income>50K".split()
)
Table = tuple[pd.DataFrame, list[dict[str, Any]], str]


def adult() -> Table:
    """Adult (48,842 x 14) with the public domain of its codes; label ``income>50K``."""
    data = pd.read_csv(SHARED / "data" / "adult.csv")
    domain = json.loads((SHARED / "data" / "adult-domain.json").read_text())
    columns = [
        {"name": c, "values": list(range(k))}
        if c in CATEGORICAL
        else {"name": c, "lower": 0, "upper": k - 1}
        for c, k in domain.items()
    ]
    return data[list(domain)], columns, "income>50K"


def generated_mixed(n: int = 20_000, seed: int = 0) -> Table:
    """Known relations: region moves smoking and age; spend is 0 for a quarter of the rows and
    grows with smoking; bmi is null for a tenth and grows with age; the label follows smoking
    and age."""
    rng = np.random.default_rng(seed)
    region = rng.choice(5, n, p=[0.4, 0.25, 0.15, 0.12, 0.08])
    smoker = rng.random(n) < np.array([0.1, 0.2, 0.3, 0.45, 0.6])[region]
    age = np.clip(np.round(30 + 6 * region + rng.normal(0, 12, n)), 18, 90).astype(np.int64)
    spend = np.where(rng.random(n) < 0.25, 0.0, rng.lognormal(3 + 0.8 * smoker, 0.6))
    bmi = np.where(
        rng.random(n) < 0.1, np.nan, np.clip(18 + 0.15 * age + rng.normal(0, 3, n), 10, 60)
    )
    label = (rng.random(n) < 0.1 + 0.5 * smoker * (age > 45)).astype(np.int64)
    data = pd.DataFrame(
        {
            "region": region,
            "smoker": smoker.astype(np.int64),
            "age": age,
            "spend": np.clip(spend, 0, 500),
            "bmi": bmi,
            "label": label,
        }
    )
    columns = [
        {"name": "region", "values": list(range(5))},
        {"name": "smoker", "values": [0, 1]},
        {"name": "age", "lower": 18, "upper": 90},
        {"name": "spend", "lower": 0.0, "upper": 500.0},
        {"name": "bmi", "lower": 10.0, "upper": 60.0, "nullable": True},
        {"name": "label", "values": [0, 1]},
    ]
    return data, columns, "label"


def generated_independent(n: int = 20_000, seed: int = 1) -> Table:
    """No relation at all: three categories, two integers and a 0/1 label, each on its own."""
    rng = np.random.default_rng(seed)
    data = pd.DataFrame(
        {
            "a": rng.choice(4, n, p=[0.5, 0.3, 0.15, 0.05]),
            "b": rng.choice(7, n),
            "c": rng.choice(3, n, p=[0.6, 0.3, 0.1]),
            "x": rng.integers(0, 50, n),
            "y": np.clip(rng.poisson(8, n), 0, 40),
            "label": (rng.random(n) < 0.3).astype(np.int64),
        }
    )
    columns = [
        {"name": "a", "values": list(range(4))},
        {"name": "b", "values": list(range(7))},
        {"name": "c", "values": list(range(3))},
        {"name": "x", "lower": 0, "upper": 49},
        {"name": "y", "lower": 0, "upper": 40},
        {"name": "label", "values": [0, 1]},
    ]
    return data, columns, "label"


TABLES = {"adult": adult, "mixed": generated_mixed, "independent": generated_independent}


def uniform_rows(columns: list[dict[str, Any]], n: int, rng: np.random.Generator) -> pd.DataFrame:
    """Rows drawn uniformly from the public domain."""
    out = {}
    for c in columns:
        if "values" in c:
            out[c["name"]] = rng.choice(c["values"], n)
        elif isinstance(c["lower"], int):
            out[c["name"]] = rng.integers(c["lower"], c["upper"] + 1, n)
        else:
            out[c["name"]] = rng.uniform(c["lower"], c["upper"], n)
    return pd.DataFrame(out)


def tstr_auc(real: pd.DataFrame, synthetic: pd.DataFrame, label: str) -> float:
    """AUC on the real rows of gradient boosting trained on the synthetic rows."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.metrics import roc_auc_score

    synthetic = synthetic[synthetic[label].notna()]  # a peer may draw the label's null cell
    y = synthetic[label].to_numpy()
    if len(np.unique(y)) < 2:
        return 0.5
    model = HistGradientBoostingClassifier(random_state=0)
    model.fit(synthetic.drop(columns=[label]).astype(float), y.astype(int))
    scores = model.predict_proba(real.drop(columns=[label]).astype(float))[:, 1]
    return float(roc_auc_score(real[label].to_numpy().astype(int), scores))


def marginal_scores(
    real: pd.DataFrame, synthetic: pd.DataFrame, columns: list[dict[str, Any]], epsilon: float
) -> dict[str, Any]:
    """``shared/tools/marginals.py`` on the two tables."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, frame in (("real", real), ("synthetic", synthetic)):
            path = Path(tmp) / f"{name}.parquet"
            pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
            paths.append(str(path))
        config = Path(tmp) / "release.yaml"
        config.write_text(yaml.safe_dump({"columns": columns}))
        out = subprocess.run(
            [
                sys.executable,
                str(SHARED / "tools" / "marginals.py"),
                *paths,
                "--config",
                str(config),
                "--epsilon",
                str(epsilon),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout)


def scorer() -> Any:
    """``shared/tools/marginals.py`` as a module (its ``coder`` and ``score``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("marginals", SHARED / "tools" / "marginals.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def scorer_codes(
    real: pd.DataFrame, columns: list[dict[str, Any]]
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Each column's cell codes and number of cells, as ``shared/tools/marginals.py`` scores
    them (the null cell last)."""
    tool = scorer()
    table = pa.Table.from_pandas(real, preserve_index=False)
    codes, sizes = {}, {}
    for column in columns:
        code, size = tool.coder(column)
        codes[column["name"]], sizes[column["name"]] = code(table[column["name"]]), size
    return codes, sizes


def cell_values(
    codes: pd.DataFrame, columns: list[dict[str, Any]], rng: np.random.Generator
) -> pd.DataFrame:
    """Values that the scorer codes as ``codes``: a category's value, a uniform value within a
    bounded column's cell (an integer among the cell's integers), null for the null cell."""
    out: dict[str, Any] = {}
    for c in columns:
        code = codes[c["name"]].to_numpy()
        if "values" in c or "lower" not in c:
            levels = list(c.get("values", [False, True]))
            # object dtype: a null must not turn the integer codes into floats ("3.0" != "3")
            out[c["name"]] = pd.Series(
                [levels[i] if i < len(levels) else None for i in code], dtype=object
            )
            continue
        lo, hi = float(c["lower"]), float(c["upper"])
        integer = isinstance(c["lower"], int) and isinstance(c["upper"], int)
        k = int(min(CELLS, hi - lo + 1)) if integer else CELLS
        width = (hi - lo + (1 if integer else 0)) / k
        cell = np.minimum(code, k - 1)
        if integer:  # the integers x with floor((x - lo) / width) == cell
            first = np.ceil(lo + cell * width)
            last = np.ceil(lo + (cell + 1) * width) - 1
            values = np.floor(first + rng.uniform(0, 1, len(code)) * (last - first + 1))
        else:
            values = lo + (cell + rng.uniform(0, 1, len(code))) * width
        values = np.where(code >= k, np.nan, np.clip(values, lo, hi))
        nulls = np.isnan(values)
        out[c["name"]] = values.astype(np.int64) if integer and not nulls.any() else values
    return pd.DataFrame(out)


def peer_release(
    method: str,
    real: pd.DataFrame,
    columns: list[dict[str, Any]],
    epsilon: float,
    seed: int,
    timeout: float,
) -> pd.DataFrame | None:
    """A smartnoise-synth release (``mst``, ``aim``, ``*_sample``) fitted on exactly the cells
    the scorer scores (its codes as categorical columns over their public domain), its codes
    mapped back to values the scorer codes the same way; ``None`` past ``timeout``."""
    name, _, sampling = method.partition("_")
    codes, sizes = scorer_codes(real, columns)
    with tempfile.TemporaryDirectory() as tmp:
        source, spec, out = (Path(tmp) / f for f in ("codes.parquet", "sizes.json", "out.parquet"))
        pq.write_table(pa.table(codes), source)
        spec.write_text(json.dumps(sizes))
        args = [name, str(epsilon), str(source), str(spec), str(out)]
        args += ["--sampling", sampling or "round", "--seed", str(seed)]
        if not run_peer("peers_mixed.py", args, timeout):
            return None
        drawn = pq.read_table(out).to_pandas()
    return cell_values(drawn, columns, np.random.default_rng(seed))


MISCONFIGURED = 1.5
"""A peer's one-way TVD at epsilon >= 1 above this multiple of the independent baseline's is
refused: MST spends a third of its budget on exactly those marginals, so losing to each column's
own noisy histogram means the peer was given other cells than the scorer's."""


def check_peer(row: dict[str, Any]) -> None:
    """Refuse a peer row that :data:`MISCONFIGURED` flags (raises ``RuntimeError``)."""
    if row["method"] in ("ours", "uniform", "independent", "bootstrap") or row["epsilon"] < 1:
        return
    baseline = row["independent"]["tvd1"]
    if row["tvd1"] > MISCONFIGURED * baseline:
        raise RuntimeError(
            f"{row['method']} on {row['table']} at epsilon {row['epsilon']:g}: one-way TVD "
            f"{row['tvd1']} against the independent baseline's {baseline}: the peer is "
            "misconfigured (not on the scorer's cells?), so the row is not recorded"
        )


def independent_draw(
    real: pd.DataFrame, columns: list[dict[str, Any]], epsilon: float, seed: int
) -> dict[str, float]:
    """The TVDs of ``shared/tools/marginals.py``'s independent baseline drawn with ``seed`` (the
    tool draws it once, with seed 0): each column's cells plus Laplace noise at epsilon / d,
    clipped, normalised and sampled, scored as the tool scores it."""
    codes, sizes = scorer_codes(real, columns)
    rng = np.random.default_rng(seed)
    drawn = {}
    for name, size in sizes.items():
        noisy = np.bincount(codes[name], minlength=size) + rng.laplace(
            0, len(sizes) / epsilon, size
        )
        cells = np.clip(noisy, 0, None)
        p = cells / cells.sum() if cells.sum() > 0 else np.full(size, 1 / size)
        drawn[name] = rng.choice(size, len(codes[name]), p=p)
    return dict(scorer().score(codes, drawn, sizes, np.random.default_rng(1)))


def run(
    table: str, epsilon: float, method: str, seed: int, timeout: float = 600.0
) -> dict[str, Any]:
    from dpsmooth_spark import Synthesizer

    real, columns, label = TABLES[table]()
    start = time.perf_counter()
    if method == "independent":
        scores = independent_draw(real, columns, epsilon, seed)
        return {"table": table, "epsilon": epsilon, "method": method, "release": seed, **scores}
    if method == "ours":
        synthetic = Synthesizer(columns, epsilon).fit(real).sample(len(real))
    elif method == "adaptive":
        mechanism = {"method": "adaptive"}
        synthetic = Synthesizer(columns, epsilon, mechanism=mechanism).fit(real).sample(len(real))
    elif method == "uniform":
        synthetic = uniform_rows(columns, len(real), np.random.default_rng(seed))
    elif method == "bootstrap":  # the no-privacy floor: the real rows resampled
        synthetic = real.sample(len(real), replace=True, random_state=seed).reset_index(drop=True)
    else:
        found = peer_release(method, real, columns, epsilon, seed, timeout)
        if found is None:
            return {
                "table": table,
                "epsilon": epsilon,
                "method": method,
                "release": seed,
                "timeout_s": timeout,
            }
        synthetic = found
    seconds = time.perf_counter() - start
    scores = marginal_scores(real, synthetic, columns, epsilon)
    row = {
        "table": table,
        "epsilon": epsilon,
        "method": method,
        "release": seed,
        "tvd1": scores["tvd1"],
        "tvd2": scores["tvd2"],
        "tvd3": scores["tvd3"],
        "independent": scores["independent"],
        "auc": tstr_auc(real, synthetic, label),
        "seconds": round(seconds, 1),
    }
    check_peer(row)
    return row


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tables", default=",".join(TABLES))
    ap.add_argument("--epsilons", default="0.1,1,10")
    ap.add_argument("--methods", default="ours,uniform")
    ap.add_argument("--releases", type=int, default=1)
    ap.add_argument("--peer-timeout", type=float, default=600.0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "mixed.json")
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the rows of --out whose (table, epsilon, method) this run does not repeat",
    )
    args = ap.parse_args(argv)
    runs: list[dict[str, Any]] = []
    for table in args.tables.split(","):
        for epsilon in map(float, args.epsilons.split(",")):
            for method in args.methods.split(","):
                for seed in range(args.releases if method != "uniform" else 1):
                    runs.append(run(table, epsilon, method, seed, args.peer_timeout))
                    print(json.dumps(runs[-1]), flush=True)
    commands = ["python -m benchmarks mixed " + " ".join(argv)]
    if args.merge and args.out.exists():
        old = json.loads(args.out.read_text())
        redone = {(r["table"], r["epsilon"], r["method"]) for r in runs}
        kept = [r for r in old["runs"] if (r["table"], r["epsilon"], r["method"]) not in redone]
        runs = kept + runs
        commands = old.get("commands", [old.get("command")]) + commands
    args.out.write_text(
        json.dumps({"commands": commands, "secure_noise": True, "runs": runs}, indent=1)
    )
