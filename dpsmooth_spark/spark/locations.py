"""Where a release reads and writes, and the refusal of any release that would overwrite its input.

Every location is normalised before it is compared: local paths (and ``file://`` URIs) are
resolved (absolute, ``..`` and symlinks followed, trailing slashes dropped); other URIs keep their
scheme and host with a normalised path; an Iceberg table is its catalog, identifier and data
location. Two locations overlap when one equals or contains the other.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from dpsmooth_spark.spark import lake


class OverlapError(ValueError):
    """The output (or the ledger) would overwrite or mix with the input; nothing was done."""


@dataclass(frozen=True)
class Location:
    """A normalised place in the lake.

    Attributes:
        what: how a message names it, e.g. ``input path /lake/patients``.
        root: the resolved path or normalised URI everything lives under (``None`` when unknown).
        table: ``(catalog uri, identifier)`` of a catalog table.
    """

    what: str
    root: str | None
    table: tuple[str, str] | None = None


def normalise(path: str) -> str:
    """A path or URI in the form locations compare in."""
    if path.startswith("file:"):
        path = urlsplit(path).path or path.removeprefix("file:")
    if "://" not in path:
        return os.path.realpath(os.path.expanduser(path))
    parts = urlsplit(path)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{posixpath.normpath(parts.path or '/')}"


def contains(outer: str, inner: str) -> bool:
    """True when ``inner`` is ``outer`` or lies below it (both normalised)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def overlap(a: Location, b: Location) -> bool:
    """True when two locations share a table or one's files lie within the other's."""
    if a.table is not None and a.table == b.table:
        return True
    return (
        a.root is not None
        and b.root is not None
        and (contains(a.root, b.root) or contains(b.root, a.root))
    )


def table_location(fmt: str, path: str, catalog_cfg: Any, what: str) -> Location:
    """The location of an input or output table (a path, a Delta folder or an Iceberg table)."""
    if fmt == "table":
        name = path.lower() if "." in path else f"default.{path.lower()}"
        return Location(f"{what} catalog table {path!r}", None, ("spark_catalog", name))
    if fmt != "iceberg":
        return Location(f"{what} {path}", normalise(path))
    identity = (catalog_cfg.uri, path)
    return Location(
        f"{what} Iceberg table {path!r}", normalise(lake.table_root(path, catalog_cfg)), identity
    )


def check_no_overlap(config: Any, extra_output: str | None = None) -> None:
    """Refuse, before anything is read, spent or written, a release whose output (or
    ``extra_output``, e.g. an evaluation report folder) overlaps its input, or whose output
    contains the budget ledger.

    Raises:
        OverlapError: naming both locations.
    """
    source = table_location(config.input.format, config.input.path, config.input.catalog, "input")
    outputs = [
        table_location(config.output.format, config.output.path, config.output.catalog, "output")
    ]
    if extra_output is not None:
        outputs = [Location(f"report folder {extra_output}", normalise(extra_output))]
    for target in outputs:
        if overlap(source, target):
            raise OverlapError(
                f"the {target.what} overlaps the {source.what} (resolved: {target.root} and "
                f"{source.root}); a release never writes into, over or around its own input. "
                "Choose another output. Nothing was read, spent or written."
            )
    if extra_output is None and config.output.format != "table":
        ledger = normalise(config.ledger_path)
        if outputs[0].root is not None and contains(outputs[0].root, ledger):
            raise OverlapError(
                f"the budget ledger {ledger} lies inside the {outputs[0].what}, which a release "
                "replaces; set ledger.path outside it. Nothing was read, spent or written."
            )
