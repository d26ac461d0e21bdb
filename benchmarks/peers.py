"""One release by a public DP synthesizer (smartnoise-synth MST or AIM), for side-by-side runs.

Runs in its own environment (``scripts/bench-peers-env`` builds ``.venv-peers``), never in the
project's: ``python benchmarks/peers.py METHOD EPSILON REAL.parquet BOUNDS.json OUT.parquet
[--bins B] [--delta D] [--sampling round|sample]``: smartnoise's default randomized rounding
(``round``) or i.i.d. draws from the fitted model (``sample``).
Each column is binned on its public bounds (``--bins`` equal cells, no budget spent on bounds);
the synthesizer's bin midpoints are spread uniformly within their cell, so its marginals are
compared as continuous values like ours.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def model_rows(synth, method: str, rows: int, sampling: str, columns) -> pd.DataFrame:
    """``rows`` records from a fitted smartnoise MST or AIM by mbi's ``synthetic_data`` with
    ``sampling`` (``round``: randomized rounding; ``sample``: i.i.d. draws), decoded to the
    table's ``columns`` (``peers_mixed.py`` uses it too)."""
    data = synth.synthesizer.synthetic_data(rows=rows, method=sampling)
    if method == "mst":
        data = synth.undo_compress_fn(data)
    names = ["col" + str(i) for i in range(synth._transformer.output_width)]
    records = [tuple(t[1:]) for t in data.df[names].itertuples()]
    return pd.DataFrame(synth._transformer.inverse_transform(records), columns=columns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("method", choices=["mst", "aim"])
    ap.add_argument("epsilon", type=float)
    ap.add_argument("real")
    ap.add_argument("bounds", help="JSON {column: [lower, upper]}")
    ap.add_argument("out")
    ap.add_argument("--bins", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--sampling", choices=["round", "sample"], default="round")
    args = ap.parse_args()

    from snsynth import Synthesizer
    from snsynth.transform import BinTransformer, TableTransformer

    bounds = json.loads(Path(args.bounds).read_text())
    real = pq.read_table(args.real).to_pandas()[list(bounds)]
    transformer = TableTransformer(
        [BinTransformer(bins=args.bins, lower=lo, upper=hi) for lo, hi in bounds.values()]
    )
    np.random.seed(args.seed)
    synth = Synthesizer.create(args.method, epsilon=args.epsilon, delta=args.delta, verbose=False)
    synth.fit(real, transformer=transformer, preprocessor_eps=0.0)
    if args.sampling == "round":
        out = synth.sample(len(real))
    else:
        out = model_rows(synth, args.method, len(real), "sample", real.columns)
    rng = np.random.default_rng(args.seed)
    columns = {}
    for name, (lo, hi) in bounds.items():
        width = (hi - lo) / args.bins
        values = np.asarray(out[name], dtype=float)
        columns[name] = np.clip(values + rng.uniform(-0.5, 0.5, len(values)) * width, lo, hi)
    pq.write_table(pa.Table.from_pandas(pd.DataFrame(columns)), args.out)


if __name__ == "__main__":
    main()
