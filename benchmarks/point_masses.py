"""``python -m benchmarks point_masses``: continuous columns with a share of values at a bound.

The table (20,000 rows): ``rain``, 0 (its lower bound) on a fifth of the rows, else a gamma;
``sensor``, a normal clipped at its upper bound 50 (about 16% there); ``x``, a normal with no
mass at its bounds. Per release (the in-memory synthesizer, defaults, secure noise) and with
``point_masses: off`` beside it: the share of each column's values exactly at each bound, real
and released, and each column's W1 distance to the real one.

Writes ``benchmarks/point_masses.json``; docs/results.md has the table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import wasserstein_distance

ROOT = Path(__file__).resolve().parents[1]
COLUMNS: list[dict[str, Any]] = [
    {"name": "rain", "lower": 0.0, "upper": 100.0},
    {"name": "sensor", "lower": 0.0, "upper": 50.0},
    {"name": "x", "lower": -4.0, "upper": 4.0},
]


def table(n: int = 20_000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rain = np.where(rng.random(n) < 0.8, rng.gamma(2.0, 5.0, n), 0.0).clip(0, 100)
    sensor = np.minimum(rng.normal(40, 10, n), 50.0).clip(0, 50)
    return pd.DataFrame({"rain": rain, "sensor": sensor, "x": rng.normal(0, 1, n).clip(-4, 4)})


def scores(real: pd.DataFrame, synthetic: pd.DataFrame) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in COLUMNS:
        name = c["name"]
        for side in ("lower", "upper"):
            out[f"{name}_at_{side}"] = [
                round(float((real[name] == c[side]).mean()), 4),
                round(float((synthetic[name] == c[side]).mean()), 4),
            ]
        out[f"{name}_w1"] = round(float(wasserstein_distance(real[name], synthetic[name])), 4)
    return out


def main(argv: list[str] | None = None) -> None:
    from dpsmooth_spark import Synthesizer

    ap = argparse.ArgumentParser(prog="python -m benchmarks point_masses", description=__doc__)
    ap.add_argument("--epsilons", default="0.3,1")
    ap.add_argument("--releases", type=int, default=3)
    args = ap.parse_args(argv)
    real = table()
    runs = []
    for epsilon in map(float, args.epsilons.split(",")):
        for mode in ("auto", "off"):
            for release in range(args.releases):
                synth = Synthesizer(COLUMNS, epsilon, mechanism={"point_masses": mode})
                synthetic = synth.fit(real).sample(len(real))
                runs.append(
                    {
                        "epsilon": epsilon,
                        "point_masses": mode,
                        "release": release,
                        **scores(real, synthetic),
                    }
                )
                print(json.dumps(runs[-1]), flush=True)
    (ROOT / "benchmarks" / "point_masses.json").write_text(
        json.dumps(
            {
                "command": "python -m benchmarks point_masses " + " ".join(argv or []),
                "secure_noise": True,
                "runs": runs,
            },
            indent=1,
        )
    )
