"""A strong simple relation through a release: integer age and nullable float bmi.

    python -m benchmarks relation [--releases 10] [--epsilon 1] [--methods fixed,adaptive]

20,000 rows: age ~ N(50, 15) rounded and clipped to [18, 95], bmi = 25 + 0.3 (age - 50) + N(0,
4.6) clipped to [10, 60] and null for a tenth (correlation about 0.69 on the rows with both).
Each release (secure noise, ``mechanism.method`` per method, in memory) reports the correlation
of its rows with both values. Writes ``benchmarks/relation.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = [
    {"name": "age", "lower": 18, "upper": 95},
    {"name": "bmi", "lower": 10.0, "upper": 60.0, "nullable": True},
]


def age_bmi(n: int = 20_000, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    age = np.clip(rng.normal(50, 15, n), 18, 95).round().astype(np.int64)
    bmi = np.clip(25 + 0.3 * (age - 50) + rng.normal(0, 4.6, n), 10, 60)
    bmi[rng.random(n) < 0.1] = np.nan
    return pd.DataFrame({"age": age, "bmi": bmi})


def correlation(frame: pd.DataFrame) -> float:
    both = frame.dropna().astype(float)
    return float(np.corrcoef(both["age"], both["bmi"])[0, 1])


def main(argv: list[str]) -> None:
    from dpsmooth_spark import Synthesizer

    ap = argparse.ArgumentParser(prog="python -m benchmarks relation", description=__doc__)
    ap.add_argument("--releases", type=int, default=10)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--methods", default="fixed,adaptive")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "relation.json")
    args = ap.parse_args(argv)
    real = age_bmi()
    rows = []
    for method in args.methods.split(","):
        for release in range(args.releases):
            synth = Synthesizer(COLUMNS, args.epsilon, mechanism={"method": method})
            synthetic = synth.fit(real).sample(len(real))
            rows.append({"method": method, "release": release, "corr": correlation(synthetic)})
            print(json.dumps(rows[-1]), flush=True)
    out = {
        "command": "python -m benchmarks relation " + " ".join(argv),
        "secure_noise": True,
        "epsilon": args.epsilon,
        "real_corr": correlation(real),
        "runs": rows,
    }
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main(__import__("sys").argv[1:])
