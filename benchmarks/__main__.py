"""``python -m benchmarks COMMAND [options]``: one command line for every benchmark."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "fidelity": "benchmarks.fidelity",
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python -m benchmarks {{{','.join(COMMANDS)}}} [options]", file=sys.stderr)
        raise SystemExit(2)
    importlib.import_module(COMMANDS[sys.argv[1]]).main(sys.argv[2:])


if __name__ == "__main__":
    main()
