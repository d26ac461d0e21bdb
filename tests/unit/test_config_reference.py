"""docs/config.md is the generated reference of the config schema, and every key is described."""

from pathlib import Path

from dpsmooth_spark.config_reference import missing_descriptions, render

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "config.md"


def test_every_config_key_has_a_description() -> None:
    assert missing_descriptions() == []


def test_written_reference_matches_the_schema() -> None:
    assert REFERENCE.read_text() == render(), (
        "docs/config.md is out of date: python -m dpsmooth_spark config-reference > docs/config.md"
    )


def test_reference_lists_every_default() -> None:
    text = render()
    assert "| `mechanism.jitter` | float | `0.02` |" in text
    assert "| `privacy.epsilon` | float | *required* |" in text
    assert "| `columns[].values` | list of bool or int or str or `auto` or null | `null` |" in text
