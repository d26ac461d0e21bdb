"""One release of a mixed table by smartnoise-synth's MST or AIM on the scorer's own cells.

Runs in the peers environment (``scripts/peers_env``), never the project's:
``python benchmarks/peers_mixed.py METHOD EPSILON CODES.parquet SIZES.json OUT.parquet
[--sampling round|sample]``. ``CODES.parquet`` holds each column's cell codes as
``shared/tools/marginals.py`` computes them (``0 .. size - 1``, the null cell last), and
``SIZES.json`` each column's number of cells: every column is categorical over exactly the cells
the scorer scores, its domain the public one (the transformer is fitted on every code, not on the
data). ``--sampling``: mbi's randomized rounding (``round``, smartnoise's default) or i.i.d. draws
from the fitted model (``sample``). The output holds codes; ``benchmarks/mixed.py`` maps them back
to values the scorer codes the same way.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from peers import model_rows  # the sibling script (benchmarks/ is this script's sys.path[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("method", choices=["mst", "aim"])
    ap.add_argument("epsilon", type=float)
    ap.add_argument("codes")
    ap.add_argument("sizes", help="JSON {column: cells}")
    ap.add_argument("out")
    ap.add_argument("--sampling", choices=["round", "sample"], default="round")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from snsynth import Synthesizer
    from snsynth.transform import LabelTransformer, TableTransformer

    sizes = json.loads(Path(args.sizes).read_text())
    codes = pq.read_table(args.codes).to_pandas()[list(sizes)]
    longest = max(sizes.values())
    domain = pd.DataFrame({c: np.arange(longest) % k for c, k in sizes.items()})
    transformer = TableTransformer([LabelTransformer(nullable=False) for _ in sizes])
    transformer.fit(domain)  # every cell, from the public sizes alone
    np.random.seed(args.seed)
    synth = Synthesizer.create(args.method, epsilon=args.epsilon, verbose=False)
    synth.fit(codes, transformer=transformer, preprocessor_eps=0.0)
    out = model_rows(synth, args.method, len(codes), args.sampling, codes.columns)
    pq.write_table(pa.Table.from_pandas(out.astype(np.int64), preserve_index=False), args.out)


if __name__ == "__main__":
    main()
