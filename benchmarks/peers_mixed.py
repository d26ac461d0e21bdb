"""One release of a mixed table by smartnoise-synth's MST or AIM, for side-by-side runs.

Runs in the peers environment (``scripts/peers_env``), never the project's:
``python benchmarks/peers_mixed.py METHOD EPSILON REAL.parquet COLUMNS.json OUT.parquet
[--sampling round|sample]``. A column with ``values`` is categorical (its codes as labels); an
integer column with at most 16 values keeps one cell per value, a wider one is cut into 16
equal cells on its public bounds and drawn uniformly within its cell, as
``shared/tools/marginals.py`` scores it. ``--sampling``: mbi's randomized rounding (``round``,
smartnoise's default) or i.i.d. draws from the fitted model (``sample``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from peers import model_rows  # the sibling script (benchmarks/ is this script's sys.path[0])

CELLS = 16


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("method", choices=["mst", "aim"])
    ap.add_argument("epsilon", type=float)
    ap.add_argument("real")
    ap.add_argument("columns", help="JSON list of the config's columns")
    ap.add_argument("out")
    ap.add_argument("--sampling", choices=["round", "sample"], default="round")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from snsynth import Synthesizer
    from snsynth.transform import BinTransformer, LabelTransformer, TableTransformer

    columns = json.loads(Path(args.columns).read_text())
    real = pq.read_table(args.real).to_pandas()[[c["name"] for c in columns]]
    transformers, binned = [], {}
    for c in columns:
        wide = "values" not in c and c["upper"] - c["lower"] + 1 > CELLS
        if wide:
            binned[c["name"]] = (c["lower"], c["upper"], isinstance(c["lower"], int))
            nullable = bool(c.get("nullable", False))
            transformers.append(
                BinTransformer(bins=CELLS, lower=c["lower"], upper=c["upper"], nullable=nullable)
            )
        else:
            transformers.append(LabelTransformer(nullable=False))
    np.random.seed(args.seed)
    synth = Synthesizer.create(args.method, epsilon=args.epsilon, verbose=False)
    synth.fit(real, transformer=TableTransformer(transformers), preprocessor_eps=0.0)
    out = model_rows(synth, args.method, len(real), args.sampling, real.columns)
    rng = np.random.default_rng(args.seed)
    for name, (
        lo,
        hi,
        integer,
    ) in binned.items():  # a bin's value: uniform within its cell; NaN stays
        width = (hi - lo + (1 if integer else 0)) / CELLS
        cell = np.clip(np.floor((out[name].to_numpy(float) - lo) / width), 0, CELLS - 1)
        values = lo + (cell + rng.uniform(0, 1, len(out))) * width
        out[name] = np.clip(np.floor(values), lo, hi).astype(np.int64) if integer else values
    pq.write_table(pa.Table.from_pandas(out, preserve_index=False), args.out)


if __name__ == "__main__":
    main()
