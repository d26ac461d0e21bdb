"""The configuration reference (``docs/config.md``), generated from the config schema.

Every key of :class:`~dpsmooth_spark.config.ReleaseConfig` with its type, default and the
one-line ``Field(description=...)``; ``python -m dpsmooth_spark config-reference`` prints it, and
a test fails when the written file and the schema disagree.
"""

from __future__ import annotations

import json
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from dpsmooth_spark.config import ReleaseConfig

HEADER = """# Configuration reference

Generated from the config schema by `python -m dpsmooth_spark config-reference > docs/config.md`
(`tests/unit/test_config_reference.py` fails when this file and the schema disagree). Every key
is optional unless its default says *required*; unknown keys are errors that name the key.
Relative paths resolve against the config file's folder. `--set key=value` overrides any key.
"""


def _model(annotation: Any) -> type[BaseModel] | None:
    """The config model inside ``annotation`` (``X``, ``X | None``, ``list[X]``), if any."""
    for arg in (annotation, *typing.get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def type_name(annotation: Any) -> str:
    """A reader's name for a field's type: ``auto | on | off``, ``int or null``, ``list of str``."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        named = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin in (list, tuple):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "*required*"
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        return "" if isinstance(value, BaseModel) else f"`{value!r}`"
    value = field.default
    if value is None or value is PydanticUndefined:
        return "`null`"
    if isinstance(value, tuple | list):
        return f"`{json.dumps(list(value))}`"
    return f"`{json.dumps(value) if isinstance(value, bool) else value}`"


def _rows(model: type[BaseModel], prefix: str) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        rows.append(
            f"| `{prefix}{name}` | {type_name(field.annotation)} | {_default(field)} "
            f"| {field.description or ''} |"
        )
        nested = _model(field.annotation)
        if (
            nested is not None
            and nested is not model
            and typing.get_origin(field.annotation) not in (list, tuple)
        ):
            if name in ReleaseConfig.model_fields and prefix == "":
                continue  # a top-level section gets its own table
            rows.extend(_rows(nested, f"{prefix}{name}."))
    return rows


def missing_descriptions(model: type[BaseModel] = ReleaseConfig, prefix: str = "") -> list[str]:
    """Every key (dotted) whose field has no description."""
    out = []
    for name, field in model.model_fields.items():
        if not field.description:
            out.append(prefix + name)
        nested = _model(field.annotation)
        if nested is not None and nested is not model:
            out.extend(missing_descriptions(nested, f"{prefix}{name}."))
    return out


def render() -> str:
    """The whole reference as Markdown: the top-level keys, then one table per section."""
    head = "| key | type | default | description |\n|---|---|---|---|"
    parts = [HEADER, "## Top level\n", head, *_rows(ReleaseConfig, "")]
    for name, field in ReleaseConfig.model_fields.items():
        nested = _model(field.annotation)
        if nested is None:
            continue
        many = typing.get_origin(field.annotation) in (list, tuple)
        key = f"{name}[]" if many else name
        intro = (nested.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        intro = " ".join(intro.replace("``", "`").split())
        parts += ["", f"## `{key}`\n", intro, "", head, *_rows(nested, f"{key}.")]
    return "\n".join(parts) + "\n"
