"""The checks every release makes on the exact row counts of a data pass, before any noise.

They are operator-facing and release nothing (docs/privacy.md section 2): a failure writes no
file, and its message names the rule that failed, never a count, so a job's error says no more
than that the table breaks a configured rule. Spark-free, so the in-memory synthesizer makes the
same checks.
"""

from __future__ import annotations


class InvalidDataError(ValueError):
    """The data violates the configured rules (invalid rows, bounds); nothing was released."""


def check_rows(
    seen: int,
    invalid: int,
    clamped: int,
    on_invalid: str = "error",
    max_clamped_fraction: float = 0.5,
) -> None:
    """Refuse an empty table, invalid rows under ``on_invalid: error``, a table left empty by
    dropping them, and more than ``max_clamped_fraction`` of the kept rows outside the bounds.

    ``clamped`` counts kept rows (a row with a null in a nullable column included) with a value
    outside its bounds; the kept rows are ``seen - invalid``.
    """
    if seen == 0:
        raise InvalidDataError("the input table has no rows; nothing was released")
    if invalid and on_invalid == "error":
        raise InvalidDataError(
            "some rows have a null, NaN, infinite or non-numeric value in a selected column, or "
            "a value outside its declared domain (categorical values); a column may hold nulls "
            "when declared nullable: true; fix the data or set input.on_invalid: drop. Nothing "
            "was released."
        )
    kept = seen - invalid
    if kept == 0:
        raise InvalidDataError(
            "no valid rows remain after dropping invalid ones; nothing was released"
        )
    if clamped > max_clamped_fraction * kept:
        raise InvalidDataError(
            "more than input.max_clamped_fraction "
            f"({max_clamped_fraction}) of the rows lie outside the public bounds; the bounds are "
            "probably wrong. Nothing was released."
        )
