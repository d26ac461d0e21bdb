"""``python -m benchmarks point_masses``: continuous columns with a share of values at a bound.

The table (20,000 rows): ``rain``, 0 (its lower bound) on a fifth of the rows, else a gamma;
``sensor``, a normal clipped at its upper bound 50 (about 16% there); ``x``, a normal with no
mass at its bounds. Per release (the in-memory synthesizer, defaults, secure noise) and with
``point_masses: off`` beside it: the share of each column's values exactly at each bound, real
and released, and each column's W1 distance to the real one. ``--adaptive``: the same releases
through ``mechanism.method: adaptive`` instead, recorded beside the others (``"method":
"adaptive"``).

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
    ap.add_argument("--adaptive", action="store_true", help="mechanism.method adaptive instead")
    args = ap.parse_args(argv)
    real = table()
    path = ROOT / "benchmarks" / "point_masses.json"
    recorded = json.loads(path.read_text()) if path.exists() else {}
    kept = [r for r in recorded.get("runs", []) if (r.get("method") == "adaptive") != args.adaptive]
    modes: list[dict[str, Any]] = (
        [{"method": "adaptive"}]
        if args.adaptive
        else [{"point_masses": "auto"}, {"point_masses": "off"}]
    )
    runs = []
    for epsilon in map(float, args.epsilons.split(",")):
        for mechanism in modes:
            for release in range(args.releases):
                synth = Synthesizer(COLUMNS, epsilon, mechanism=mechanism)
                synthetic = synth.fit(real).sample(len(real))
                runs.append(
                    {"epsilon": epsilon, **mechanism, "release": release, **scores(real, synthetic)}
                )
                print(json.dumps(runs[-1]), flush=True)
    key = "adaptive_command" if args.adaptive else "command"
    recorded[key] = "python -m benchmarks point_masses " + " ".join(argv or [])
    recorded.update({"secure_noise": True, "runs": kept + runs})
    path.write_text(json.dumps(recorded, indent=1))
