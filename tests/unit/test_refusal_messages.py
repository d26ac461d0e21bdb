"""What a refusal may say: the rule that failed, never a record's value or a count of rows; and
the config-only plan checks that run before any noise (docs/privacy.md section 2)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from dpsmooth_spark.core.columns import ColumnValueError, column_codec
from dpsmooth_spark.mechanisms.stages import PlanError
from dpsmooth_spark.mechanisms.synthesizer import SynthesizerParams
from dpsmooth_spark.mechanisms.synthesizer.plan import check_fractions
from dpsmooth_spark.pipeline.row_checks import InvalidDataError, check_rows
from dpsmooth_spark.privacy.ledger import BudgetLedger


@pytest.mark.parametrize(
    ("seen", "invalid", "clamped", "on_invalid"),
    [(1234, 17, 0, "error"), (1234, 1234, 0, "drop"), (1234, 33, 1100, "drop")],
    ids=["invalid", "all-dropped", "clamped"],
)
def test_a_row_check_names_its_rule_and_no_count(seen, invalid, clamped, on_invalid):
    with pytest.raises(InvalidDataError) as err:
        check_rows(seen, invalid, clamped, on_invalid)
    message = str(err.value)
    assert "Nothing was released" in message or "nothing was released" in message
    for count in (seen, invalid, clamped, seen - invalid):
        assert str(count) not in message


def test_rows_with_a_null_are_kept_rows_of_the_clamping_check():
    """200 rows read, none invalid, 150 clamped (100 of them with a null in a nullable column):
    150 of 200 kept rows, within max_clamped_fraction 0.8 (the check read the 100 rows without
    a null as the kept ones, and refused 150 of 100)."""
    check_rows(200, 0, 150, "error", 0.8)
    with pytest.raises(InvalidDataError):
        check_rows(200, 0, 150, "error", 0.7)


def test_an_encoding_error_keeps_no_value():
    """pyarrow's and numpy's messages quote the value they fail on; the codec's error names the
    column and its kind only, and drops the original from the traceback."""
    codec = column_codec("x", pa.int64(), True, 0, 10)
    with pytest.raises(ColumnValueError) as err:
        codec.encode(pa.array(["ZEBRASENTINEL"]))
    assert "ZEBRASENTINEL" not in str(err.value) and "'x'" in str(err.value)
    assert err.value.__suppress_context__ and err.value.__cause__ is None


def test_nanosecond_timestamps_are_read_to_the_microsecond():
    """A timestamp's digits below the microsecond are truncated (a per-value map); the safe
    cast failed with a message that quoted the value."""
    values = pa.array([1_700_000_000_123_456_789, None], pa.timestamp("ns"))
    codec = column_codec("t", values.type, True, dt.datetime(2000, 1, 1), dt.datetime(2030, 1, 1))
    encoded = codec.encode(values)
    assert encoded[0] == pytest.approx(1_700_000_000.123456, abs=1e-6)


def test_psi_fractions_are_checked_on_the_config_alone():
    psi = SynthesizerParams(candidate_strategy="psi")
    check_fractions(psi, tables=False)  # 0.2 fits in (1 - 0.06) * 0.4 = 0.376
    with pytest.raises(PlanError, match="Nothing was spent"):
        check_fractions(psi, tables=True)  # half of that goes to the tables: 0.188 < 0.2
    check_fractions(SynthesizerParams(), tables=True)  # auto fits PSI where it fits


def test_the_ledger_lists_a_refused_release_as_refused(tmp_path):
    ledger = BudgetLedger(tmp_path / "ledger.sqlite")
    ledger.record_statistics(
        "r1", "t", "smooth_pca", 0.5, 0.0, {"stages": []}, {"refused": "PlanError: no"}, None
    )
    entry = ledger.find("r1")
    assert entry is not None and entry.refusal == "PlanError: no"
    row = next(line for line in ledger.format("t").splitlines() if "r1" in line)
    assert "refused" in row and "0.5" in row
    assert ledger.spent("t") == (0.5, 0.0)


def test_a_session_with_its_ui_or_event_log_on_is_stated():
    """The UI (on by Spark's default) and the event log show exact row counts: a release run in
    such a session says so in its warnings (docs/privacy.md section 12)."""
    from dpsmooth_spark.spark.session import side_channel_warnings

    assert side_channel_warnings(lambda key, default: default)[0].startswith("spark.ui.enabled")
    on = {"spark.ui.enabled": "false", "spark.eventLog.enabled": "true"}
    warned = side_channel_warnings(lambda key, default: on.get(key, default))
    assert len(warned) == 1 and "event log" in warned[0]
    off = {"spark.ui.enabled": "false"}
    assert side_channel_warnings(lambda key, default: off.get(key, default)) == []

    def connect(key, default):
        raise RuntimeError("not exposed")

    assert side_channel_warnings(connect) == []
