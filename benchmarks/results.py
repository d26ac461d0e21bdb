"""``python -m benchmarks results``: the fidelity benchmark's current table for docs/results.md.

Reads ``benchmarks/fidelity.json`` and prints, per table and epsilon, the mean over releases of
each method's correlation ratio, Wasserstein-1 ratio and train-on-synthetic AUC (runs with extra
``params`` are left out: they are experiments, not the defaults).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
METHODS = ("ours", "ours_zcdp", "independent", "mst", "aim")


def fidelity_table(path: Path) -> str:
    """Markdown: one row per (table, epsilon), ``corr / W1 / AUC (releases)`` per method."""
    runs = json.loads(path.read_text())["runs"]
    cells: dict[tuple[str, float], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.get("params") or "corr_ratio" not in run:
            continue
        cells[(run["table"], run["epsilon"])][run["method"]].append(run)
    head = "| table | epsilon | " + " | ".join(METHODS) + " |"
    lines = [head, "|---|---|" + "---|" * len(METHODS)]
    for (table, epsilon), by_method in sorted(cells.items()):
        row = [table, f"{epsilon:g}"]
        for method in METHODS:
            found = by_method.get(method)
            if not found:
                row.append("-")
                continue
            corr, w1, auc = (
                np.mean([r[k] for r in found]) for k in ("corr_ratio", "w1_ratio", "auc")
            )
            row.append(f"{corr:.2f} / {w1:.2f} / {auc:.2f} ({len(found)})")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fidelity", type=Path, default=ROOT / "benchmarks" / "fidelity.json")
    args = ap.parse_args(argv)
    print(fidelity_table(args.fidelity))
