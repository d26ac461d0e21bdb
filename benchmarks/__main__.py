"""``python -m benchmarks COMMAND [options]``: one command line for every benchmark."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "fidelity": "benchmarks.fidelity",  # fidelity on several tables vs baselines and peers
    "wdbc": "benchmarks.wdbc",  # the paper's protocol on WDBC (and parameter grids)
    "quality": "benchmarks.quality",  # WDBC release quality vs baselines (Table 5 setting)
    "summary": "benchmarks.summary",  # Algorithms 1-3: operators, accuracy, timings
    "mechanisms": "benchmarks.mechanisms",  # Bernstein and distance-query mechanisms
    "speed": "benchmarks.speed",  # data pass vs numpy, LP scaling
    "scale": "benchmarks.scale",  # 10^6 .. 10^8 rows end to end
    "stages": "benchmarks.stages",  # driver stage times and memory over R x C
    "accuracy": "benchmarks.accuracy",  # correlation error of the fit at 10^6 .. 10^7 rows
    "mixed": "benchmarks.mixed",  # mixed tables (Adult): 1-, 2-, 3-way TVD, TSTR AUC
    "relation": "benchmarks.relation",  # a strong age/bmi relation through 10 releases
    "units": "benchmarks.units",  # person-level releases: fidelity, the bounded pass's cost
    "persons": "benchmarks.persons",  # synthetic persons: rows per unit, within-unit relations
    "wide": "benchmarks.wide",  # 100-300 columns: factor tables vs independent columns and MST
    "domains": "benchmarks.domains",  # auto bounds (DP quantiles), auto values (selection)
    "levels": "benchmarks.levels",  # a 10,000-value category on 10^6 rows
    "point_masses": "benchmarks.point_masses",  # shares of values at a bound, W1
    "results": "benchmarks.results",  # docs/results.md's fidelity table from its JSON
    "check": "benchmarks.check",  # seeded regression check against benchmarks/check.json
}


def main() -> None:
    usage = f"usage: python -m benchmarks {{{','.join(COMMANDS)}}} [options]"
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(usage)
        return
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(usage, file=sys.stderr)
        raise SystemExit(2)
    importlib.import_module(COMMANDS[sys.argv[1]]).main(sys.argv[2:])


if __name__ == "__main__":
    main()
