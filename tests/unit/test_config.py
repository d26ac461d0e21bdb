"""Config validation: every bad value is an error that names its key."""

from __future__ import annotations

import copy

import pytest
import yaml

from dpsmooth_spark.config import ConfigError, load_config, parse_config


def broken(base: dict, path: str, value) -> dict:
    data = copy.deepcopy(base)
    node = data
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if key.isdigit() else node[key]
    last = keys[-1]
    if value is KeyError:
        del node[last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        ("privacy.epsilon", 0, "privacy.epsilon"),
        ("privacy.epsilon", -1.0, "privacy.epsilon"),
        ("privacy.epsilon", float("inf"), "epsilon must be finite"),
        ("privacy.delta", 1.5, "privacy.delta"),
        ("privacy.epsilon", KeyError, "privacy.epsilon: Field required"),
        ("columns.0.lower", 100.0, "lower (100.0) must be < upper"),
        ("columns.0.upper", float("nan"), "must be finite"),
        ("columns", [], "columns"),
        ("input.format", "xlsx", "input.format"),
        ("output.rows", 0, "output.rows"),
        ("mechanism", {"candidates": 3}, "mechanism.candidates"),
        ("mechanism", {"basis": "cubic"}, "mechanism.basis"),
        ("mechanism", {"candidtes": 100}, "mechanism.candidtes: unknown key"),
        ("outptu", {}, "outptu: unknown key"),
        ("seed", 7, "seed is only allowed with test_mode"),
        ("release_id", "a b/../c", "release_id"),
        ("input.format", "iceberg", "input.catalog is required with format iceberg"),
        ("output.format", "iceberg", "output.catalog is required with format iceberg"),
        ("output.format", "orc", "output.format"),
        (
            "output.partition_by",
            "nope",
            "output.partition_by must be a configured column or 'date'",
        ),
        ("bernstein", {"function": "svm"}, "bernstein.label is required"),
        ("bernstein", {"columns": ["nope"]}, "bernstein.columns are not configured columns"),
        (
            "bernstein",
            {"function": "svm", "label": "malignant", "columns": ["malignant"]},
            "bernstein.label cannot also be one of bernstein.columns",
        ),
        ("bernstein", {"k": 0}, "bernstein.k"),
        ("distance", {"metric": "bourgain"}, "distance.queries"),
        ("distance", {"metric": "cosine"}, "distance.metric"),
    ],
)
def test_bad_values_name_the_key(wdbc_config_dict, path, value, fragment):
    with pytest.raises(ConfigError) as err:
        parse_config(broken(wdbc_config_dict, path, value))
    assert fragment in str(err.value)


def test_duplicate_columns_rejected(wdbc_config_dict):
    data = copy.deepcopy(wdbc_config_dict)
    data["columns"].append(dict(data["columns"][0]))
    with pytest.raises(ConfigError, match="duplicate column names"):
        parse_config(data)


def test_example_config_loads_with_defaults(tmp_path, wdbc_config_dict):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(wdbc_config_dict))
    config = load_config(path, {"privacy.epsilon": 0.5})
    assert config.privacy.epsilon == 0.5 and config.privacy.delta == 0.0
    assert len(config.columns) == 31
    assert config.mechanism.lp_solver == "glop"


def test_unreadable_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("input: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("42")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(scalar)


def test_a_pooled_histogram_forced_under_zcdp_is_refused(wdbc_config_dict):
    """``pooled_histogram: on`` is for pure epsilon-DP only (docs/privacy.md 3f): with a delta
    the config is refused before any budget is spent; ``auto`` is accepted either way."""
    data = copy.deepcopy(wdbc_config_dict)
    data["mechanism"] = {"pooled_histogram": "on"}
    assert parse_config(data).mechanism.pooled_histogram == "on"
    data["privacy"]["delta"] = 1e-6
    with pytest.raises(ConfigError, match="pooled_histogram: on needs pure epsilon-DP"):
        parse_config(data)
    data["mechanism"] = {"pooled_histogram": "auto"}
    assert parse_config(data).privacy.delta == 1e-6


def test_pair_columns_must_be_configured(wdbc_config_dict):
    data = copy.deepcopy(wdbc_config_dict)
    data["mechanism"] = {"pair_columns": ["malignant"]}
    assert parse_config(data).mechanism.pair_columns == ("malignant",)
    data["mechanism"] = {"pair_columns": ["nope"]}
    with pytest.raises(ConfigError, match="pair_columns"):
        parse_config(data)


def test_iceberg_paths_are_identifiers_and_the_ledger_lives_in_the_warehouse(
    wdbc_config_dict, tmp_path
):
    data = copy.deepcopy(wdbc_config_dict)
    data["output"] = {
        "path": "synth.wdbc",
        "format": "iceberg",
        "catalog": {"uri": f"sqlite:///{tmp_path}/c.db", "warehouse": str(tmp_path / "wh")},
    }
    config = parse_config(data, base_dir=tmp_path)
    assert config.output.path == "synth.wdbc"  # not resolved as a file path
    assert config.ledger_path == str(tmp_path / "wh" / "dpsmooth_ledger.sqlite")
    assert config.bernstein_axes() == config.column_names  # no label: every column


def test_meaningless_epsilon_is_refused_unless_allowed(wdbc_config_dict):
    with pytest.raises(ConfigError, match="privacy.allow_large_epsilon: true"):
        parse_config(broken(wdbc_config_dict, "privacy.epsilon", 1e9))
    allowed = parse_config(
        broken(wdbc_config_dict, "privacy", {"epsilon": 1e9, "allow_large_epsilon": True})
    )
    assert allowed.privacy.warnings and "weak guarantee" in allowed.privacy.warnings[0]
    assert parse_config(broken(wdbc_config_dict, "privacy.epsilon", 100.0)).privacy.warnings
    assert (
        "e^20" in parse_config(broken(wdbc_config_dict, "privacy.epsilon", 20)).privacy.warnings[0]
    )
    assert parse_config(broken(wdbc_config_dict, "privacy.epsilon", 10)).privacy.warnings == []


def test_relative_paths_resolve_against_the_config_folder(tmp_path, monkeypatch):
    folder = tmp_path / "project" / "conf"
    folder.mkdir(parents=True)
    path = folder / "release.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "input": {"path": "../data/patients/"},
                "columns": [{"name": "a", "lower": 0, "upper": 1}],
                "privacy": {"epsilon": 1},
                "output": {"path": "s3://bucket/synth/../x", "format": "parquet"},
                "ledger": {"path": "ledger.sqlite"},
            }
        )
    )
    elsewhere = tmp_path / "worker"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(path)
    assert config.input.path == str(tmp_path / "project" / "data" / "patients")
    assert config.output.path == "s3://bucket/synth/../x"  # URIs are the store's business
    assert config.ledger_path == str(folder / "ledger.sqlite")
    # a path typed on the command line is relative to the working directory
    config = load_config(path, {"output.path": "out/today", "input.path": "/abs/in"})
    assert config.output.path == str(elsewhere / "out" / "today")
    assert config.input.path == "/abs/in"


def test_iceberg_catalog_paths_resolve_but_identifiers_do_not(tmp_path, monkeypatch):
    path = tmp_path / "release.yaml"
    catalog = {"uri": "sqlite:///catalog.db", "warehouse": "wh"}
    path.write_text(
        yaml.safe_dump(
            {
                "input": {"path": "clinic.patients", "format": "iceberg", "catalog": catalog},
                "columns": [{"name": "a", "lower": 0, "upper": 1}],
                "privacy": {"epsilon": 1},
                "output": {
                    "path": "clinic.synth",
                    "format": "iceberg",
                    "catalog": {"uri": "sqlite:////abs/c.db", "warehouse": "file:///abs/wh"},
                },
            }
        )
    )
    monkeypatch.chdir("/")
    config = load_config(path)
    assert config.input.path == "clinic.patients" and config.output.path == "clinic.synth"
    assert config.input.catalog.uri == f"sqlite:///{tmp_path}/catalog.db"
    assert config.input.catalog.warehouse == str(tmp_path / "wh")
    assert config.output.catalog.uri == "sqlite:////abs/c.db"
    assert config.output.catalog.warehouse == "file:///abs/wh"


def test_yaml_booleans_and_nulls_in_a_string_domain_say_how_to_quote_them():
    """``values: [yes, no]`` comes back from YAML 1.1 as booleans, and ``null`` as no value: the
    errors say so and show the quoted form (AER CPS1988's smsa column)."""
    import pyarrow as pa
    import yaml

    from dpsmooth_spark.config import ColumnConfig
    from dpsmooth_spark.core.columns import ColumnTypeError, column_codec

    column = ColumnConfig(**yaml.safe_load("{name: smsa, values: [yes, no]}"))
    with pytest.raises(ColumnTypeError, match=r"quote the values .*\['yes', 'no'\]"):
        column_codec("smsa", pa.string(), True, values=tuple(column.values))
    quoted = ColumnConfig(**yaml.safe_load("{name: smsa, values: ['yes', 'no']}"))
    assert column_codec("smsa", pa.string(), True, values=tuple(quoted.values)).values == (
        "yes",
        "no",
    )
    with pytest.raises(ValueError, match="read as null"):
        ColumnConfig(**yaml.safe_load("{name: x, values: [a, null]}"))
