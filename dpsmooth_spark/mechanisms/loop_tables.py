"""What the adaptive loop (``mechanisms/adaptive.py``) measures, as data: a candidate table
(:class:`Candidate`), a measured one (:class:`Measurement`), and the :class:`Tables` that say
which tables the first round and the later rounds may measure, their exact answers, their
sensitivities and how the model reads them. This class is a table of records' marginals;
``mechanisms/records.py`` adds the bounds and shapes of its columns, ``mechanisms/persons.py``
the tables of a release of persons.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpsmooth_spark.core.graphical import GraphicalModel, Observed

Scope = tuple[int, ...]

MAX_CANDIDATE_CELLS = 65_536
"""Largest marginal a candidate may be."""
MAX_PASS_CELLS = 4_000_000
"""Most counts the data pass computes for the candidates: a way's candidates are offered from
the smallest up, as many sizes as fit whole (their cost grows with the cube of the columns),
:func:`candidates`."""


@dataclass(frozen=True)
class Candidate:
    """A table the loop may measure: its columns, its cells, its weight (how many columns of the
    scored workload of 3-way marginals it covers) and its kind (``rows``: a marginal of the
    table's rows; a release of persons adds ``units`` and ``pairs``, ``mechanisms/persons.py``)."""

    scope: Scope
    cells: int
    weight: float
    kind: str = "rows"


@dataclass(frozen=True)
class Measurement:
    """A measured table as plain data: its scope, noisy counts (flattened, C order), the noise
    standard deviation of each count, the round that measured it (0: the first round) and its
    kind (:class:`Candidate`)."""

    scope: Scope
    values: np.ndarray
    std: float
    round: int
    kind: str = "rows"

    def to_dict(self) -> dict[str, Any]:
        """The measurement, JSON-ready."""
        return {
            "scope": list(self.scope),
            "values": self.values.tolist(),
            "std": self.std,
            "round": self.round,
            "kind": self.kind,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """A measurement from :meth:`to_dict`'s form."""
        values = np.asarray(data["values"], float)
        return cls(
            tuple(data["scope"]), values, data["std"], data["round"], data.get("kind", "rows")
        )


class Tables:
    """What the loop measures and how the model answers it: here the marginals of one table of
    records (kind ``rows``); ``mechanisms/persons.py`` adds the tables of a release of persons.

    ``sizes``: cells per variable of the model; ``answer(scope)``: a marginal's exact counts.
    """

    def __init__(
        self, sizes: Sequence[int], answer: Callable[[Scope], np.ndarray], max_way: int
    ) -> None:
        self.sizes = tuple(int(v) for v in sizes)
        self.answer = answer
        self.max_way = max_way
        self.groups: dict[int, np.ndarray] = {}
        """Per column read in coarser cells by the later rounds' coarse tables, the group of
        each of its cells (:meth:`coarsen`)."""

    def first(self) -> list[Candidate]:
        """What the first round measures: every one-way marginal."""
        return [Candidate((v,), self.sizes[v], 1.0) for v in range(len(self.sizes))]

    def pool(self) -> list[Candidate]:
        """What each later round may pick from."""
        return candidates(self.sizes, min(self.max_way, len(self.sizes)))

    def exact(self, c: Candidate) -> np.ndarray:
        return self.answer(c.scope)

    def reserve(
        self, c: Candidate, share: float, total: float, std: Callable[[float], float]
    ) -> float:
        """Share of first-round table ``c``'s budget ``share`` kept for a table that follows it
        (:meth:`follow`; 0: none), given the rows' noisy count ``total`` and ``std(budget)``, the
        noise standard deviation of a count measured at ``budget``."""
        return 0.0

    def first_cells(self, c: Candidate, total: float, std: float) -> Candidate:
        """First-round table ``c`` as measured, given the rows' noisy count ``total`` and the
        noise standard deviation ``std`` of its counts (here as it is)."""
        return c

    def join_first(
        self,
        found: Sequence[Candidate],
        budgets: Sequence[float],
        total: float,
        std: Callable[[float], float],
    ) -> list[tuple[Candidate, float]]:
        """The first round's tables after the first, each with its budget, as measured, given
        the rows' noisy count ``total`` and ``std(budget)`` (here as they are)."""
        return list(zip(found, budgets, strict=True))

    def follow(self, c: Candidate) -> Candidate:
        """The table measured after first-round table ``c`` with the budget :meth:`reserve`
        kept."""
        raise NotImplementedError

    @property
    def keeps_low_picks(self) -> bool:
        """Whether the later rounds keep their picks where fewer than two paired rounds would be
        left below the signal threshold (``adaptive.MIN_SIGNAL``), rather than give their budget
        to the first round: a pick of related columns shows what one-ways cannot (three columns
        of 2,000 rows at epsilon 1, two correlated 0.8: the first round taking all kept 0.00-0.05
        of it, one coarse pick 0.61-0.66; three 8-level categories at 0.3, two equal in 0.6 of
        the rows: 2-way TVD 0.53 -> 0.11), and costs little where the columns are independent
        (0.097 -> 0.105)."""
        return True

    def coarsen(self, measurements: Sequence[Measurement], total: float, std: float) -> None:
        """Choose :attr:`groups` from the first round's ``measurements``, the rows' noisy count
        ``total`` and the noise standard deviation ``std`` of a later round's count (none
        here)."""

    def size(self, c: Candidate) -> float:
        """What the first round's split counts as ``c``'s cells."""
        return float(c.cells)

    def pairing_cells(self, c: Candidate) -> int:
        """The cells the test that pairs up the later rounds counts for ``c``
        (``adaptive.MIN_SIGNAL``; here its own)."""
        return c.cells

    def sensitivity(self, c: Candidate) -> float:
        """Table ``c``'s L1 sensitivity in the accountant's units (it multiplies by the rows a
        privacy unit may contribute): one record moves one count of a marginal by one."""
        return 1.0

    def prepare(self, model: GraphicalModel, total: float, scopes: Sequence[Scope] = ()) -> None:
        """Cache what :meth:`predict` and :meth:`scale` need of a fitted model; ``scopes``: the
        marginals the round will ask for (those a clique holds are reduced from it together,
        ``GraphicalModel.held_marginals``)."""
        self._cliques, self._total = model.clique_marginals(), total
        self._model = model
        self._memo: dict[tuple[int, Scope, Scope], np.ndarray] = {}
        self._held = model.held_marginals(scopes, self._cliques)

    def marginal(self, scope: Scope) -> np.ndarray:
        """The prepared model's marginal over ``scope`` (the predictions of one round share
        their cliques' reduced tables)."""
        found = self._held.get(scope)
        if found is not None:
            return found
        return self._model.marginal(scope, self._cliques, self._memo)

    def predict(self, c: Candidate) -> np.ndarray:
        """The prepared model's answer to ``c``, in counts."""
        return self._total * self.marginal(c.scope)

    def scale(self, c: Candidate) -> float:
        """What turns ``c``'s error into the rows' units for the score (1: already)."""
        return 1.0

    def model_scope(self, c: Candidate) -> Scope | None:
        """The model's scope ``c`` measures (``None``: it does not enter the model)."""
        return c.scope

    def observed(self, m: Measurement) -> list[Observed]:
        """What ``m`` tells the model, in counts: its tables (none, one, or one per column of a
        pooled one-way, ``mechanisms/records.py``)."""
        return [Observed(m.scope, m.values, m.std)]

    def rows_sum(self, m: Measurement) -> tuple[float, float] | None:
        """``m``'s estimate of the table's rows and its variance (``None``: none)."""
        return float(m.values.sum()), m.std**2 * m.values.size

    @property
    def structure(self) -> tuple[Scope, ...]:
        """Scopes one clique of the model must hold whatever was measured."""
        return ()

    def on_bounds(
        self, model: GraphicalModel, total: float, measurements: Sequence[Measurement]
    ) -> dict[int, tuple[float, float]]:
        """Per column with bounds apart, the shares of its first and last cells' rows on its lower
        and upper bound (none here)."""
        return {}

    def shapes(self, measurements: Sequence[Measurement]) -> dict[int, np.ndarray]:
        """Per column with a measured shape, each sub-cell's share of its cell's rows
        (``CellCoding.decode``; none here)."""
        return {}


def candidates(sizes: Sequence[int], max_way: int) -> list[Candidate]:
    """Every marginal of up to ``max_way`` columns within the public size limits. Where a way's
    candidates do not all fit in :data:`MAX_PASS_CELLS` with the smaller ways', the smallest of
    them that do are offered (all of a size or none), and no larger way: on WDBC (30 columns of
    16 cells and a 0/1 label) the triples that hold the label, 512 counts each."""
    return list(_candidates(tuple(int(v) for v in sizes), max_way))


@functools.lru_cache(maxsize=8)
def _candidates(sizes: tuple[int, ...], max_way: int) -> tuple[Candidate, ...]:
    """:func:`candidates`, enumerated once per table (the pass and each ``pool`` ask for it;
    100 columns' triples take about a second)."""
    d = len(sizes)
    out: list[Candidate] = []
    for way in range(1, max_way + 1):
        found = []
        for scope in itertools.combinations(range(d), way):
            cells = int(np.prod([sizes[v] for v in scope]))
            if cells <= MAX_CANDIDATE_CELLS:
                found.append(Candidate(scope, cells, float(way)))
        kept = _smallest(found, MAX_PASS_CELLS - sum(c.cells for c in out)) if way > 1 else found
        out += kept
        if len(kept) < len(found):
            break
    return tuple(out)


def _smallest(found: Sequence[Candidate], room: int) -> list[Candidate]:
    """The candidates of the smallest sizes whose counts together fit in ``room``: every
    candidate of a size or none of it."""
    per_size = Counter(c.cells for c in found)
    limit, used = 0, 0
    for cells in sorted(per_size):
        used += cells * per_size[cells]
        if used > room:
            break
        limit = cells
    return [c for c in found if c.cells <= limit]
