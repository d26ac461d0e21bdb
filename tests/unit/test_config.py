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
        ("output.partition_by", "nope", "output.partition_by must be a configured column or 'date'"),
        ("bernstein", {"function": "svm"}, "bernstein.label is required"),
        ("bernstein", {"columns": ["nope"]}, "bernstein.columns are not configured columns"),
        ("bernstein", {"function": "svm", "label": "malignant", "columns": ["malignant"]},
         "bernstein.label cannot also be one of bernstein.columns"),
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


def test_pair_columns_must_be_configured(wdbc_config_dict):
    data = copy.deepcopy(wdbc_config_dict)
    data["mechanism"] = {"pair_columns": ["malignant"]}
    assert parse_config(data).mechanism.pair_columns == ("malignant",)
    data["mechanism"] = {"pair_columns": ["nope"]}
    with pytest.raises(ConfigError, match="pair_columns"):
        parse_config(data)


def test_iceberg_paths_are_identifiers_and_the_ledger_lives_in_the_warehouse(wdbc_config_dict, tmp_path):
    data = copy.deepcopy(wdbc_config_dict)
    data["output"] = {"path": "synth.wdbc", "format": "iceberg",
                      "catalog": {"uri": f"sqlite:///{tmp_path}/c.db", "warehouse": str(tmp_path / "wh")}}
    config = parse_config(data, base_dir=tmp_path)
    assert config.output.path == "synth.wdbc"  # not resolved as a file path
    assert config.ledger_path == str(tmp_path / "wh" / "dpsmooth_ledger.sqlite")
    assert config.bernstein_axes() == config.column_names  # no label: every column
