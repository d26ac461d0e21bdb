"""The checks every release makes on the exact row counts of its data pass, before any noise.

They are operator-facing (the counts are exact, never released): a failure releases nothing
(docs/privacy.md section 2). Spark-free, so the in-memory synthesizer makes the same checks.
"""

from __future__ import annotations


class InvalidDataError(ValueError):
    """The data violates the configured rules (invalid rows, bounds); nothing was released."""


def check_rows(
    seen: int,
    invalid: int,
    clamped: int,
    kept: int,
    on_invalid: str = "error",
    max_clamped_fraction: float = 0.5,
) -> None:
    """Refuse an empty table, invalid rows under ``on_invalid: error``, a table left empty by
    dropping them, and more than ``max_clamped_fraction`` of the rows outside the bounds."""
    if seen == 0:
        raise InvalidDataError("the input table has no rows; nothing was released")
    if invalid and on_invalid == "error":
        raise InvalidDataError(
            f"{invalid} row(s) have a null, NaN, infinite or non-numeric value in a selected "
            "column, or a value outside its declared domain (categorical values); a column may "
            "hold nulls when declared nullable: true; fix the data or set input.on_invalid: "
            "drop. Nothing was released."
        )
    if kept == 0:
        raise InvalidDataError(
            "no valid rows remain after dropping invalid ones; nothing was released"
        )
    if clamped > max_clamped_fraction * kept:
        raise InvalidDataError(
            f"{clamped} of {kept} rows lie outside the public bounds (more than "
            f"input.max_clamped_fraction = {max_clamped_fraction}); the bounds are probably "
            "wrong. Nothing was released."
        )
