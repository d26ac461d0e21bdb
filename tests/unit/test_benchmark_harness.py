"""The benchmark harness's own rules: peers get exactly the scorer's cells, a misconfigured peer
row is refused, and the regression check flags a change beyond the release noise."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks import check, mixed


@pytest.mark.parametrize("table", ["adult", "mixed"])
def test_peer_codes_map_back_to_values_the_scorer_codes_the_same(table):
    """Codes (the scorer's cells, the null cell included) drawn at random, mapped to values and
    scored again, give the same codes: a peer fitted on the codes is scored on its own cells."""
    real, columns, _ = mixed.TABLES[table]()
    _, sizes = mixed.scorer_codes(real.head(50), columns)
    rng = np.random.default_rng(0)
    drawn = pd.DataFrame({c: rng.integers(0, k, 2000) for c, k in sizes.items()})
    values = mixed.cell_values(drawn, columns, rng)
    again, _ = mixed.scorer_codes(values, columns)
    for name in sizes:
        np.testing.assert_array_equal(again[name], drawn[name].to_numpy(), err_msg=name)


def test_a_peer_row_that_loses_to_independent_columns_is_refused():
    row = {"method": "mst_sample", "table": "adult", "epsilon": 1.0, "tvd1": 0.021}
    row["independent"] = {"tvd1": 0.0049}
    with pytest.raises(RuntimeError, match="misconfigured"):
        mixed.check_peer(row)
    mixed.check_peer({**row, "tvd1": 0.006})  # within 1.5x: kept
    mixed.check_peer({**row, "epsilon": 0.1})  # below epsilon 1 the baseline is no yardstick
    mixed.check_peer({**row, "method": "ours"})


def test_the_check_flags_a_metric_worse_than_its_release_noise():
    recorded = {"r": {"tvd2": [0.034, 0.035, 0.036], "auc": [0.89, 0.88, 0.90], "seconds": [10.0]}}
    same = check.verdicts(recorded, {"r": {"tvd2": [0.034, 0.035, 0.036]}})
    assert [x["verdict"] for x in same] == ["ok"]
    worse = check.verdicts(
        recorded, {"r": {"tvd2": [0.044, 0.045, 0.046], "auc": [0.80] * 3, "seconds": [16.0]}}
    )
    assert [x["verdict"] for x in worse] == ["REGRESSED"] * 3
    better = check.verdicts(recorded, {"r": {"tvd2": [0.02] * 3, "auc": [0.95] * 3}})
    assert [x["verdict"] for x in better] == ["ok", "ok"]
