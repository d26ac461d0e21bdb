"""Candidate support points for the fit, and the independence prior over them.

Candidates are drawn from the product of private one-way marginals (each a density on a grid of
cells) and, when a private correlation is known, from a Gaussian copula with the same marginals.
The log prior weight of each candidate is ``log p_ind(c) - log q(c)``: the product of the
marginals divided by the density the candidate was drawn from, so the prior over the candidates
represents a table of independent columns whatever share came from the copula.
Every input is DP (or public randomness): the candidates are post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import ndtr, ndtri

from dpsmooth_spark.core.factors import cell_quantile
from dpsmooth_spark.core.maxent import project_to_simplex


@dataclass(frozen=True)
class GridMarginals:
    """One density per column, piecewise constant on ``cells`` equal cells of [-1, 1].

    Attributes:
        probabilities: ``(d, cells)`` cell probabilities, each row summing to 1.
    """

    probabilities: np.ndarray

    @property
    def cells(self) -> int:
        """Cells per column."""
        return int(self.probabilities.shape[1])

    @staticmethod
    def centres(cells: int) -> np.ndarray:
        """Cell midpoints of the grid on [-1, 1]."""
        return -1.0 + (2.0 * np.arange(cells) + 1.0) / cells

    def quantile(self, u: np.ndarray) -> np.ndarray:
        """Inverse CDF, column by column, of ``u`` (``(C, d)`` in (0, 1)): :func:`cell_quantile`."""
        out = np.empty_like(u)
        for i, p in enumerate(self.probabilities):
            out[:, i] = cell_quantile(p, u[:, i])
        return out


NOISE_FLOOR_STDS = 1.0
"""In a clear histogram, a cell below this many noise standard deviations is taken as empty
before the projection onto the simplex: the cells beyond the data's spread hold noise only,
and the projection alone keeps their positive draws as mass far from the data."""

NOMINAL_NOISE_FLOOR_STDS = 0.0
""":data:`NOISE_FLOOR_STDS` for a category's levels. They have no order, so none lies beyond
the data's spread, and the score counts each level's share, not its distance: the projection's
common offset alone cuts the levels the noise swamps. Cut at one deviation, a long tail of small
levels lost its mass (Adult at epsilon 0.1, ten seeded releases: native-country's one-way TVD
0.034 -> 0.031, the mean 1-/2-/3-way 0.0182 / 0.0731 / 0.1371 -> 0.0179 / 0.0726 / 0.1365; at 1
and 10 and on the generated tables level). An integer's levels keep the floor: at 0 the table
without relations lost 6% of its one-way TVD at epsilon 1 on two integers whose tails are empty."""

CLEAR_FACTOR = 0.8
"""A histogram is clear when its positive-part James-Stein factor is at least this: the noise
accounts for at most a fifth of its squared deviation from uniform."""

SWAMPED_FACTOR = 0.2
"""A histogram whose James-Stein factor towards uniform is below this is swamped by its noise
and shrunk towards the columns' shared shape (:func:`shared_shape`) where one is given
(docs/decisions/0004)."""

SIMPLEX_MIN_BINS = 8
"""From this many cells on, a histogram that is not clear is projected onto the simplex; with
fewer, its negative cells are set to 0 and the rest rescaled (docs/decisions/0004)."""


def histogram_density(
    shares: np.ndarray,
    std: np.ndarray,
    cells: int,
    target: np.ndarray | None = None,
    target_std: np.ndarray | float = 0.0,
    near_target: bool = False,
    floor: float = NOISE_FLOOR_STDS,
) -> np.ndarray:
    """A noisy histogram (cell shares with noise ``std``) made a distribution, spread evenly over
    the grid cells of each bin.

    With ``f = max(0, 1 - (k - 2) / chi2)`` the positive-part James-Stein factor (``chi2`` of
    uniform against the noisy cells), at most :func:`largest_shrinkage_factor`: a clear histogram
    (``f >=`` :data:`CLEAR_FACTOR`) loses its cells below ``floor`` noise standard deviations
    (:data:`NOISE_FLOOR_STDS`) and is projected onto the
    probability simplex (a common offset subtracted, negatives 0); any other is shrunk towards
    uniform by ``f`` and made a distribution (:data:`SIMPLEX_MIN_BINS`), except that a swamped
    one (``f <`` :data:`SWAMPED_FACTOR`) is shrunk towards ``target`` where given (a
    distribution on the ``k`` bins, known with noise ``target_std`` independent of this
    histogram's: :func:`shared_shape`), by its James-Stein factor against the target (0 keeps
    the target), at least ``f`` (docs/decisions/0004). With ``near_target``, any histogram the
    noise cannot tell from ``target`` (James-Stein factors against it on the cells and on
    :data:`COARSE_CELLS` coarse ones both below :data:`CLEAR_FACTOR`), clear or not, is shrunk
    towards it by the larger (:data:`SHARED_SHAPE_WIDE`)."""
    k = shares.size
    uniform = np.full(k, 1.0 / k)
    factor = _shrinkage_factor(shares, std, uniform)
    towards, near = None, 1.0
    if target is not None:
        noise = np.broadcast_to(np.hypot(std, target_std), (k,))
        towards = _shrinkage_factor(shares, noise, target)
        if near_target:
            near = max(towards, _coarse_shrinkage_factor(shares, noise, target))
    if near < CLEAR_FACTOR:
        factor = near
    elif factor >= CLEAR_FACTOR:
        kept = np.where(shares > floor * std, shares, 0.0)
        mass = project_to_simplex(kept) if kept.sum() > 0 else uniform
        return np.repeat(mass / (cells // k), cells // k)
    elif towards is None or factor >= SWAMPED_FACTOR:
        target = uniform
    else:
        factor = max(factor, towards)
    centre = uniform if target is None else target
    shrunk = centre + factor * (shares - centre)
    if k >= SIMPLEX_MIN_BINS:
        mass = project_to_simplex(shrunk)
    else:
        mass = np.maximum(shrunk, 0.0)
        mass = mass / mass.sum() if mass.sum() > 0 else centre
    return np.repeat(mass / (cells // k), cells // k)


COARSE_CELLS = 8
""":func:`histogram_density` shrinks a clear histogram towards a shared shape (``near_target``)
by the larger of the James-Stein factors on its cells and on this many coarse cells. A shape
that differs in location or spread differs by little in each cell and by much in a few coarse
ones, where the noise of a sum grows only with its root: on 64 cells at share noise 0.0025 a
column of the others' shape skewed by a linear ramp had a factor of 0.69 on the cells (its W1
0.011 -> 0.028 when shrunk) and above 0.8 on 8 cells (kept as measured); a column of the
others' shape still lands at 0.0036 (0.011 as measured). Fewer coarse cells (4, 2) leave the
James-Stein factor too noisy to shrink anything."""


def _coarse_shrinkage_factor(shares: np.ndarray, std: np.ndarray, target: np.ndarray) -> float:
    """The James-Stein factor of ``shares`` (noise ``std`` each) towards ``target`` on
    :data:`COARSE_CELLS` coarse cells, 0 where the cells do not make them."""
    k = shares.size
    if k <= COARSE_CELLS or k % COARSE_CELLS:
        return 0.0
    shape = (COARSE_CELLS, k // COARSE_CELLS)
    return _shrinkage_factor(
        shares.reshape(shape).sum(axis=1),
        np.sqrt((std**2).reshape(shape).sum(axis=1)),
        target.reshape(shape).sum(axis=1),
    )


def _shrinkage_factor(shares: np.ndarray, std: np.ndarray, target: np.ndarray) -> float:
    """The positive-part James-Stein factor of noisy ``shares`` towards ``target``, at most
    :func:`largest_shrinkage_factor`."""
    k = shares.size
    chi2 = float((((shares - target) / std) ** 2).sum())
    factor = max(0.0, 1.0 - (k - 2) / chi2) if chi2 > 0 and k > 2 else 1.0
    return min(factor, largest_shrinkage_factor(k, std, target))


SHARED_SHAPE_WIDE = 50
"""From this many continuous columns on, a clear histogram is shrunk towards the shape the
others share too, where the noise cannot tell it from that shape (``near_target`` of
:func:`histogram_density`), and the fit reads it as shrunk. A wide table's columns each get a
small share of the marginals' budget while the others' mean has ``d - 1`` times less noise
variance: the 100-column factor table at epsilon 1 (clear histograms, share noise 0.0025 a
cell) came back with marginals twice as far from the data as independent Laplace histograms
(seeded, W1 0.0107 against 0.0052), 0.0053 with the shrinkage (releases, with the weights
raked to these marginals: W1 ratio 1.76 -> 0.70, docs/results.md). On the 5,000-row tables of
5-12 columns the shrunk marginals were nearer the data too (correlated at 1: W1 0.0135 ->
0.0098) but the pairs read through them lost correlation (ratio 0.22 -> 0.26-0.28): a few
columns' shapes differ by more than the noise and the shrinkage moves their moments
(docs/decisions/0004)."""

SHARED_SHAPE_MIN_COLUMNS = 3
"""A swamped histogram is shrunk towards :func:`shared_shape` where the table has at least this
many continuous columns (the column and two others); with fewer, towards uniform."""


def shared_shape(others: np.ndarray, std: float) -> tuple[np.ndarray, float] | None:
    """The shape that a swamped histogram is shrunk towards: the mean of the other continuous
    columns' noisy histograms (``(m, k)`` shares, each cell with noise ``std``, independent
    across columns) where that mean is clear (:data:`CLEAR_FACTOR`), made a distribution as
    :func:`histogram_density` does, and the noise of the mean, ``std / sqrt(m)``; ``None`` where
    the mean is not clear either, or there are fewer than ``SHARED_SHAPE_MIN_COLUMNS - 1`` other
    columns (the histogram is then shrunk towards uniform).

    Where no column's noisy histogram can be told from uniform, the others' mean often can: it
    has ``m`` times less noise variance. Public bounds are set wide, so a table's columns tend to
    sit alike within them (WDBC's all in the lower part); the shrinkage measures how far the
    column is from the others' shape and keeps what its own histogram shows there. Leaving the
    column out keeps the two noises independent. A mean that is not clear is mostly noise, and
    shrinking towards it is worse than towards uniform. Post-processing of the noisy histograms
    (docs/decisions/0004)."""
    m = others.shape[0]
    if m + 1 < SHARED_SHAPE_MIN_COLUMNS:
        return None
    return clear_shape(others.mean(axis=0), std / np.sqrt(m))


def clear_shape(shares: np.ndarray, std: float) -> tuple[np.ndarray, float] | None:
    """``shares`` (``k`` cells, each with noise ``std``) made a distribution as
    :func:`histogram_density` does, and ``std``, where they are clear (:data:`CLEAR_FACTOR`
    against uniform); ``None`` where not: a target for swamped histograms
    (:func:`shared_shape`; the pooled histogram, docs/privacy.md section 3f)."""
    k = len(shares)
    std_cells = np.full(k, float(std))
    if _shrinkage_factor(shares, std_cells, np.full(k, 1.0 / k)) < CLEAR_FACTOR:
        return None
    return histogram_density(shares, std_cells, k), float(std)


def level_bins(levels: int, bins: int) -> np.ndarray:
    """The histogram bin (of ``bins`` equal cells of [-1, 1]) of each of a lattice column's
    ``levels`` points ``-1 + 2 l / (levels - 1)``."""
    points = -1.0 + 2.0 * np.arange(levels) / (levels - 1)
    return np.minimum(((points + 1.0) / 2.0 * bins).astype(np.int64), bins - 1)


def measured_per_level(levels: int, bins: int, cells: int) -> bool:
    """Whether a lattice column of ``levels`` points gets a histogram of one cell per level
    (:func:`level_counts`) rather than ``bins`` equal cells: where two of its levels would share
    a bin (whose mass would then be split evenly between them) and the data pass's ``cells``
    hold each level apart."""
    return 2 <= levels <= cells and np.unique(level_bins(levels, bins)).size < levels


COARSE_WEIGHT = 0.8
"""Share of an ordered column's histogram weight that its coarse parts get where they are
measured after its levels (:func:`coarse_level_cells`; under zCDP the two shares are scaled to
a sum of squares of 1). Adult at epsilon 0.1, simulated with the release's noise, mean one-way
TVD over its 16-cell marginals: 0.0259 without the parts, 0.0188 at 0.8, 0.0181 at 0.9; the
values' own shares grow noisier with it (age's per-value TVD 0.067 without, 0.097 at 0.8,
0.137 at 0.9), and at 0.95 the levels no longer find the spikes (40 hours a week 39 points
off)."""

COARSE_NOISE = 0.25
""":func:`coarse_level_cells` measures an ordered column's coarse cells where the noise std of
one level's share (the histograms' common one) is at least this fraction of a level's mean
share ``1 / levels``: the levels' counts then tell little beyond a spike. Adult: 0.45 at
epsilon 0.1 (on), 0.15 at 0.3 and 0.06 at 1 (off). Switched on at 1 (three seeded releases) the
parts took the one-way TVD on 16 cells from 0.0049 to 0.0043, the 2- and 3-way level, but left
each value's own share 3-4x further off (age's per-value TVD 0.010 -> 0.037, simulated): there
a value's count is mostly signal, and the release keeps it."""

SPLIT_DEVIATIONS = 4.0
""":func:`level_parts` gives a level a part of its own where its noisy count stands this many
noise deviations above the mean of the other levels of its coarse cell (a false split: 0.35%
of levels under Laplace noise, and it costs only one more noisy part)."""


def coarse_level_cells(levels: int, bins: int, cells: int, share_std: float) -> int:
    """Coarse cells measured after an ordered lattice column's per-level counts, 0 for none
    (public values and the noisy count only): ``bins // 2`` where the column is measured per
    level (:func:`measured_per_level`) with more levels than that, and the noise std of one
    level's share, ``share_std`` (the histograms' common noise over the noisy count), is at
    least :data:`COARSE_NOISE` of the mean level share. Each coarse cell sums ``m`` levels and
    carries the noise of ``sqrt(m)`` of them; measured as one count it carries one."""
    coarse = bins // 2
    if coarse < 2 or levels <= coarse or not measured_per_level(levels, bins, cells):
        return 0
    return coarse if share_std * levels >= COARSE_NOISE else 0


def coarse_weights(pure: bool = True) -> tuple[float, float]:
    """``(coarse, levels)``: the shares of a column's histogram weight on its coarse cells and
    on its levels. A record is in one level (or the null cell) and in one coarse part (or
    none), so its column's weighted counts move by at most their sum (pure epsilon: 1) or the
    root of their sum of squares (zCDP: 1) over the two draws: the column's sensitivity is its
    weight, as without the coarse cells (docs/privacy.md 3c)."""
    coarse, fine = COARSE_WEIGHT, 1.0 - COARSE_WEIGHT
    if pure:
        return coarse, fine
    norm = float(np.hypot(coarse, fine))
    return coarse / norm, fine / norm


def coarse_cell_of(levels: int, cells: int) -> np.ndarray:
    """``(levels,)`` the coarse cell of each level: ``cells`` equal cells of the column's
    values, each level ``l`` the unit interval ``[l, l + 1)`` (an integer's values in equal
    ranges, as the one-way scores of the MST and AIM papers bin them)."""
    return (np.arange(levels) * cells) // levels


def level_parts(counts: np.ndarray, std: float, cells: int) -> np.ndarray:
    """``(levels,)`` the part of each level in the coarse histogram measured after the levels'
    noisy ``counts`` (noise ``std`` each): its coarse cell (:func:`coarse_level_cells`), or a
    part of its own (numbered after the cells) where its noisy count stands
    :data:`SPLIT_DEVIATIONS` noise deviations above the mean of its cell's other levels. A
    spike (40 hours a week) is then measured alone and keeps its own count, where inside its
    cell it could only take a share read from the noisier levels. Post-processing of the
    noisy levels; every record is in one part."""
    levels = counts.size
    cell = coarse_cell_of(levels, cells)
    size = np.bincount(cell, minlength=cells)[cell]
    total = np.bincount(cell, weights=counts, minlength=cells)[cell]
    others = np.maximum(size - 1, 1)
    spread = std * np.sqrt(1.0 + 1.0 / others)
    alone = (size > 1) & (counts - (total - counts) / others > SPLIT_DEVIATIONS * spread)
    part = cell.copy()
    part[alone] = cells + np.arange(int(alone.sum()))
    return part


def histogram_weights(
    levels: np.ndarray,
    nominal: np.ndarray,
    bins: int,
    cells: int,
    pure: bool = True,
    coarse: np.ndarray | None = None,
) -> np.ndarray:
    """``(d,)`` each column's weight in the one-way histograms' release: its counts are scaled
    by it before the common noise, so its noise std is the common one over its weight. Every
    continuous column keeps 1; the lattice columns share their number of weights (pure epsilon:
    their sum, the L1 sensitivity's part; zCDP: their sum of squares, the L2's) so that the
    sensitivities stay ``d`` and ``sqrt(d)``, in proportion to ``g ** (1/2)`` (pure) or ``g **
    (1/3)`` (zCDP), which minimises the sum over the columns of ``g`` times the noise std.
    ``g`` is the noise a column's marginal carries at the release's resolution, in noise stds:
    a category's levels (no coarser resolution), an ordered column measured per level the sum
    over its ``bins`` bins of the square root of the levels each sums (where its ``coarse``
    cells are measured, per column 0 for none: :func:`coarse_level_cells`, their number over
    their share of its weight), else its held bins. A 0/1 column reads one rate from two
    cells; an 85-value integer's 64 bins each sum one or two noisy values: with equal weights
    the first is known far better than the second."""
    levels = np.asarray(levels, dtype=np.int64)
    nominal = np.asarray(nominal, dtype=bool)
    weights = np.ones(levels.size)
    lattice = np.flatnonzero(levels >= 2)
    if lattice.size < 2:
        return weights
    noise = np.empty(lattice.size)
    for k, j in enumerate(lattice):
        size = int(levels[j])
        if not measured_per_level(size, bins, cells):  # its levels' bins, one level each
            noise[k] = np.unique(level_bins(size, bins)).size
        elif nominal[j]:  # a category: each level a cell of its own
            noise[k] = size
        elif coarse is not None and coarse[j]:  # its coarse cells, at their share of its weight
            noise[k] = coarse[j] / coarse_weights(pure)[0]
        else:  # an ordered column: each bin sums its levels' noise
            summed = np.bincount(level_bins(size, bins), minlength=bins)
            noise[k] = np.sqrt(summed[summed > 0]).sum()
    share = noise ** (0.5 if pure else 1.0 / 3.0)
    if pure:
        weights[lattice] = share * lattice.size / share.sum()
    else:
        weights[lattice] = share * np.sqrt(lattice.size / np.square(share).sum())
    return weights


def level_counts(counts: np.ndarray, levels: int) -> np.ndarray:
    """``(levels,)`` a lattice column's counts per level from its counts in ``cells >= levels``
    equal cells of [-1, 1]: each cell's count goes to the level nearest the cell's centre. A
    level's point lies in its own cell, or in the one below where rounding puts it on a cell's
    lower edge; both are nearer to it than to any other level, since levels are more than a
    cell apart."""
    cells = counts.shape[-1]
    centres = -1.0 + (2.0 * np.arange(cells) + 1.0) / cells
    nearest = np.clip(np.rint((centres + 1.0) / 2.0 * (levels - 1)), 0, levels - 1)
    return np.bincount(nearest.astype(np.int64), weights=counts, minlength=levels)


SPIKE_DEVIATIONS = 4.0
""":func:`ordered_level_density` keeps a level's own share where it stands this many noise
deviations from its bin's mean share (a false spike: 0.35% of levels under Laplace noise)."""


def ordered_level_density(
    shares: np.ndarray,
    std: float,
    bins: int,
    laplace: bool = True,
    parts: tuple[np.ndarray, np.ndarray, float] | None = None,
) -> np.ndarray:
    """``(L,)`` a distribution on the levels of an ordered lattice column (an integer or a date)
    from its noisy per-level shares (noise ``std`` each): the mass of each of ``bins`` equal
    cells as the cells' sums denoise it (:func:`lattice_density`, the noise of a sum of ``m``
    levels ``sqrt(m) std``), spread evenly over the cell's levels except those that stand
    :data:`SPIKE_DEVIATIONS` noise deviations from the cell's mean share, which keep their own
    (a spike such as 40 hours a week). Neighbouring values share what the noise cannot tell
    apart; a point mass stays where it is. With ``parts`` (each level's part, the parts' noisy
    shares and their noise std: :func:`level_parts`), :func:`parted_level_density`."""
    if parts is not None:
        return parted_level_density(shares, std, *parts)
    levels = shares.size
    where = level_bins(levels, bins)
    size = np.bincount(where, minlength=bins)
    held = np.flatnonzero(size)
    sums = np.bincount(where, weights=shares, minlength=bins)
    if held.size >= 2:
        mass = np.zeros(bins)
        noise = std * np.sqrt(size[held])
        mass[held] = lattice_density(sums[held], noise, held.size, held.size, laplace)
    else:
        mass = (size > 0).astype(np.float64)
    mean = sums[where] / size[where]
    deviation = shares - mean
    spread = std * np.sqrt(np.maximum(1.0 - 1.0 / size[where], 0.0))
    own = np.where(np.abs(deviation) > SPIKE_DEVIATIONS * spread, np.maximum(shares, 0.0), 0.0)
    rest = np.bincount(where, weights=(own == 0) * 1.0, minlength=bins)
    # the levels without a spike share what the spikes leave of their cell's noisy sum, evenly
    left = np.maximum(sums - np.bincount(where, weights=own, minlength=bins), 0.0)
    within = np.where(own > 0, own, left[where] / np.maximum(rest[where], 1.0))
    total = np.bincount(where, weights=within, minlength=bins)
    within = np.where(
        total[where] > 0, within / np.maximum(total[where], 1e-300), 1.0 / size[where]
    )
    return mass[where] * within


def parted_level_density(
    shares: np.ndarray, std: float, part: np.ndarray, measured: np.ndarray, part_std: float
) -> np.ndarray:
    """``(L,)`` a distribution on an ordered column's levels from its noisy per-level shares
    (noise ``std`` each) and the noisy shares of its parts (``measured``, noise ``part_std``
    each; ``part``: each level's, :func:`level_parts`). Each part's mass is the
    inverse-variance mean of its own share and its levels' sum (noise ``sqrt(m) std``),
    denoised as :func:`histogram_density` does; within a part the levels share it evenly plus
    their deviations from its mean, shrunk by their positive-part James-Stein factor (one for
    the column): what the levels' noise cannot tell apart is spread evenly, a clear shape
    inside the cells is kept. Post-processing of the noisy counts."""
    count = measured.size
    size = np.bincount(part, minlength=count).astype(np.float64)
    sums = np.bincount(part, weights=shares, minlength=count)
    sum_var = np.maximum(size, 1.0) * std**2
    precision = 1.0 / sum_var + 1.0 / part_std**2
    found = (sums / sum_var + measured / part_std**2) / precision
    mass = histogram_density(found, 1.0 / np.sqrt(precision), count)
    mean = sums[part] / size[part]
    deviation = np.where(size[part] > 1, shares - mean, 0.0)
    chi2 = float((deviation**2).sum()) / std**2
    free = float((size - 1.0).clip(min=0.0).sum())
    factor = max(0.0, 1.0 - (free - 2.0) / chi2) if chi2 > 0 and free > 2 else 0.0
    within = np.maximum(np.maximum(mean, 0.0) + factor * deviation, 0.0)
    total = np.bincount(part, weights=within, minlength=count)[part]
    within = np.where(total > 0, within / np.maximum(total, 1e-300), 1.0 / size[part])
    return mass[part] * within


TAIL_DEVIATIONS = 2.0
""":func:`with_tail_mass` keeps the cut levels' mass where their noisy total stands this many
noise deviations above 0."""


def with_tail_mass(density: np.ndarray, shares: np.ndarray, std: float) -> np.ndarray:
    """A denoised per-level distribution of a category (``density``, from its noisy ``shares``
    with noise ``std`` each) with the mass of the levels it cut to 0 put back where their noisy
    total is clear (:data:`TAIL_DEVIATIONS` deviations of a sum of ``m`` levels, ``sqrt(m)
    std``): spread over them in proportion to their positive noisy shares, the rest scaled
    down. A long tail of levels each below the noise (a 10,000-value column, most values on a
    few rows) holds much mass together; cut level by level it was lost (0.15 of a Zipf
    column's mass at 10^6 rows)."""
    cut = density <= 0
    if cut.sum() < 2:
        return density
    total = float(shares[cut].sum())
    if total <= TAIL_DEVIATIONS * std * np.sqrt(cut.sum()):
        return density
    positive = np.maximum(shares[cut], 0.0)
    total = min(total, 1.0)
    out = density * (1.0 - total)
    out[cut] = total * positive / positive.sum()
    return out / out.sum()


def lattice_density(
    shares: np.ndarray,
    std: np.ndarray,
    cells: int,
    levels: int,
    laplace: bool = True,
    nominal: bool = False,
) -> np.ndarray:
    """A noisy histogram (cell shares with noise ``std``) of a column whose values are its
    ``levels`` lattice points (public: an integer, boolean or categorical column), made a
    distribution on ``cells`` grid cells, its mass in the cells that hold the points.

    A bin that holds no point is empty in every table: its noisy count is noise alone and is
    left out, where :func:`histogram_density` would move it onto the nearest point (the
    middle two of a 0/1 column's four bins: its rate then reads twice the noise). The bins
    that hold points are denoised as :func:`histogram_density` does, except two
    (a two-level column), whose rate is :func:`two_level_rate`'s posterior mean: never
    exactly 0 or 1, where cutting a negative cell gave all of wine's rows one label at
    epsilon 1 (docs/mechanisms.md); a ``nominal`` column's (a category's) at
    :data:`NOMINAL_NOISE_FLOOR_STDS`. A bin's mass is split evenly over its points."""
    k = shares.size
    where = level_bins(levels, k)
    held = np.unique(where)
    std = np.broadcast_to(std, (k,))[held]
    if held.size == 2:
        rate = two_level_rate(shares[held], std, laplace)
        mass = np.array([1.0 - rate, rate])
    else:
        floor = NOMINAL_NOISE_FLOOR_STDS if nominal else NOISE_FLOOR_STDS
        mass = histogram_density(shares[held], std, held.size, floor=floor)
    per_level = mass[np.searchsorted(held, where)] / np.bincount(where, minlength=k)[where]
    density = np.zeros(cells)
    np.add.at(density, level_bins(levels, cells), per_level)  # each point's grid cell
    return density / density.sum()


def two_level_rate(
    shares: np.ndarray, std: np.ndarray, laplace: bool = True, grid: int = 2001
) -> float:
    """Posterior mean of the share ``r`` of the second of two cells, under a uniform prior on
    ``r`` and the noisy shares ``(1 - r, r) + noise`` (Laplace of std ``std`` where ``laplace``,
    else Gaussian). Where the noise swamps the counts it returns about 1/2; where a cell's
    noisy share is negative, a rate of about its noise, not 0."""
    r = np.linspace(0.0, 1.0, grid)
    std = np.asarray(std, dtype=np.float64)
    gaps = np.column_stack([(1.0 - r) - shares[0], r - shares[1]]) / std
    loglik = -np.sqrt(2.0) * np.abs(gaps).sum(axis=1) if laplace else -0.5 * (gaps**2).sum(axis=1)
    weights = np.exp(loglik - loglik.max())
    return float(weights @ r / weights.sum())


def largest_shrinkage_factor(
    k: int, std: np.ndarray | float, target: np.ndarray | None = None
) -> float:
    """The largest factor by which shrinking ``k`` noisy cell shares towards ``target``
    (uniform when not given) can pay.

    The factor of ``t + f (y - t)`` with the least squared error is
    ``f* = D / (D + sum std^2)``, ``D = ||p - t||^2`` the true histogram's squared distance from
    the target. No distribution on ``k`` cells is farther from it than one cell holding
    everything (``D <= 1 - 2 min t + ||t||^2``, ``1 - 1/k`` for uniform), so ``f*`` is at most
    that bound over itself plus ``sum std^2``, from public values alone. The James-Stein factor
    estimates ``f*`` from the noisy shares; where the noise swamps every possible histogram
    (4 cells with share noise 1.2: wine at epsilon 0.1), it overshoots: a chi-square of 8.7
    from noise alone gives 0.77, the negative cells are cut, and the whole column lands in one
    cell. Capped at this bound it is at most 0.12 there."""
    if target is None:
        spread = 1.0 - 1.0 / k
    else:
        spread = float(1.0 - 2.0 * np.min(target) + target @ target)
    noise = float(np.sum(np.broadcast_to(np.asarray(std, dtype=float), (k,)) ** 2))
    return spread / (spread + noise) if spread + noise > 0 else 1.0


def mean_from_pairs(
    prior_mean: float,
    prior_var: float,
    answers: np.ndarray,
    partner_means: np.ndarray,
    noise_var: float,
    rounds: int = 3,
) -> tuple[float, float]:
    """A column's mean ``m = E[p(x)]`` from an estimate of it (``prior_mean``, variance
    ``prior_var``) and the answers ``a_i = E[p(x) q_i(y_i)]`` of its pair terms, whose partners
    have means ``e_i = E[q_i(y_i)]`` (``partner_means``; answers with noise variance
    ``noise_var``): ``(m, the variance of the pairs' estimate of m alone)``.

    Where ``x`` is unrelated to ``y_i``, ``a_i = m e_i``; a relation adds ``delta_i``. Taking
    the relations as random effects uncorrelated with the partners' means,
    ``a_i = m e_i + mu + delta_i + noise``: ``mu`` their mean, ``tau^2`` their variance,
    estimated by moments from the residuals (as DerSimonian and Laird do), and ``m`` by
    generalised least squares with ``prior_mean`` as one more observation of it. Only the spread
    of the partners' means tells ``m`` from ``mu``: the pairs' variance is
    ``(noise_var + tau^2) / sum (e_i - mean e)^2``."""
    a = np.asarray(answers, dtype=np.float64)
    e = np.asarray(partner_means, dtype=np.float64)
    tau2 = 0.0
    for _ in range(rounds):
        w = 1.0 / (noise_var + tau2)
        normal = np.array([[1.0 / prior_var + w * e @ e, w * e.sum()], [w * e.sum(), w * e.size]])
        rhs = np.array([prior_mean / prior_var + w * e @ a, w * a.sum()])
        m, mu = np.linalg.solve(normal, rhs)
        tau2 = max(0.0, float(np.mean((a - m * e - mu) ** 2)) - noise_var)
    spread = float(np.sum((e - e.mean()) ** 2))
    return float(m), (noise_var + tau2) / spread if spread > 0 else np.inf


def tilt_to_mean(probabilities: np.ndarray, values: np.ndarray, target: float) -> np.ndarray:
    """The distribution closest in KL to ``probabilities`` under which ``values`` has mean
    ``target`` (the exponential tilt ``p exp(t v)``); ``target`` is kept strictly inside the
    range of ``values`` where ``probabilities`` is positive."""
    p = np.asarray(probabilities, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    live = p > 0
    low, high = float(v[live].min()), float(v[live].max())
    if high - low <= 0:
        return p / p.sum()
    target = float(np.clip(target, low + 1e-6 * (high - low), high - 1e-6 * (high - low)))

    def tilted(t: float) -> np.ndarray:
        q = p * np.exp(t * (v - (high if t > 0 else low)))  # exponent <= 0: no overflow
        return q / q.sum()

    scale = 1.0 / (high - low)
    t = brentq(lambda t: tilted(t) @ v - target, -1e5 * scale, 1e5 * scale)
    return tilted(t)


def correlation_from_covariance(cov: np.ndarray, floor: float = 1e-9) -> np.ndarray:
    """Correlation matrix of a covariance, with diagonal entries kept at least ``floor``."""
    std = np.sqrt(np.maximum(np.diag(cov), floor))
    corr = cov / np.outer(std, std)
    np.fill_diagonal(corr, 1.0)
    return np.clip(corr, -1.0, 1.0)


def weighted_correlation(points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(d, d)`` correlation of the columns of ``points`` under ``weights``
    (:func:`correlation_from_covariance`: 0 off the diagonal for a column of zero variance)."""
    u = np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
    centred = np.asarray(points, dtype=np.float64) - u @ points
    return correlation_from_covariance(centred.T @ (centred * u[:, None]))


def marginal_candidates(
    marginals: GridMarginals,
    count: int,
    rng: np.random.Generator,
    correlation: np.ndarray | None = None,
    copula_share: float = 0.5,
    reference: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``count`` candidates, their log prior weights (independent columns) and their log
    weights under the Gaussian copula of ``reference``.

    Without ``correlation`` every candidate comes from the product of the marginals and the prior
    is uniform. With it, ``copula_share`` of them come from the Gaussian copula with that
    correlation, the rest from the product; the proposal density is the mixture
    ``q = (1 - s) p_ind + s p_ind c_R(z)`` (``c_R`` the copula density), so the prior weight
    ``p_ind / q = 1 / (1 - s + s c_R(z))`` needs no marginal densities, nor does the weight
    ``p_ind c_S(z) / q`` of the marginals joined by the copula of another correlation ``S``.

    Args:
        marginals: private one-way marginals.
        count: number of candidates C.
        rng: public randomness.
        correlation: ``(d, d)`` private correlation matrix (positive definite), or ``None``.
        copula_share: share of candidates drawn from the copula.
        reference: ``(d, d)`` correlation ``S`` (positive definite) of the third output, or
            ``None`` (it is then the prior).

    Returns:
        ``(candidates (C, d) in (-1, 1), log prior weights (C,), log reference weights (C,))``.
    """
    d = marginals.probabilities.shape[0]
    if correlation is None or d < 2 or copula_share <= 0:
        u = rng.random((count, d))
        points = marginals.quantile(u)
        if reference is None or d < 2:  # independent candidates: the prior is uniform
            return points, np.zeros(count), np.zeros(count)
        scores = ndtri(np.clip(u, 1e-12, 1.0 - 1e-12))
        return points, np.zeros(count), gaussian_copula_log_density(scores, reference)
    from_copula = round(copula_share * count)
    chol = np.linalg.cholesky(correlation)
    z = np.vstack(
        [
            rng.standard_normal((count - from_copula, d)),
            rng.standard_normal((from_copula, d)) @ chol.T,
        ]
    )
    u = np.clip(ndtr(z), 1e-12, 1.0 - 1e-12)
    points = marginals.quantile(u)
    # z of every point under the product (its own uniforms) gives the copula density.
    scores = ndtri(u)
    log_c = gaussian_copula_log_density(scores, correlation, chol)
    with np.errstate(divide="ignore"):  # copula_share = 1: no product share, log(0) = -inf
        log_q = np.logaddexp(np.log1p(-copula_share), np.log(copula_share) + log_c)
    if reference is None:
        return points, -log_q, -log_q
    return points, -log_q, gaussian_copula_log_density(scores, reference) - log_q


def gaussian_copula_log_density(
    z: np.ndarray, correlation: np.ndarray, chol: np.ndarray | None = None
) -> np.ndarray:
    """``log c_R(z) = -1/2 log|R| - 1/2 z^T (R^-1 - I) z`` for rows of normal scores ``z``."""
    chol = np.linalg.cholesky(correlation) if chol is None else chol
    solved = np.linalg.solve(chol, z.T).T
    log_det = 2.0 * np.log(np.diag(chol)).sum()
    return -0.5 * log_det - 0.5 * ((solved**2).sum(axis=1) - (z**2).sum(axis=1))


def nearest_psd(matrix: np.ndarray, floor: float) -> np.ndarray:
    """Symmetrise and raise every eigenvalue to at least ``floor``."""
    sym = 0.5 * (matrix + matrix.T)
    vals, vecs = np.linalg.eigh(sym)
    return (vecs * np.maximum(vals, floor)) @ vecs.T


def max_entropy_correlation(
    d: int,
    pairs: np.ndarray,
    values: np.ndarray,
    sweeps: int = 200,
    tol: float = 1e-6,
    limit: float = 0.99,
) -> np.ndarray:
    """The correlation matrix of largest determinant whose ``pairs`` entries are ``values``.

    The Gaussian of most entropy with these pairwise correlations (Dempster 1972, covariance
    selection): its precision matrix is zero on every pair not given, so the correlations it
    implies are those carried along the given pairs (on a tree, the products along the path;
    for a star around a label, ``r_iL r_jL``) and no other. Solved by iterative proportional
    scaling (Speed and Kiiveri 1986): each step sets one pair's 2 x 2 block to its target by a
    rank-2 update of the precision, applied to the covariance by Woodbury's identity. Targets
    no correlation matrix can hold together (noisy measurements) leave the steps cycling; the
    result is then the last sweep's covariance as a correlation matrix, positive definite in
    any case. ``values`` are clipped to ``[-limit, limit]``.
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    values = np.clip(np.asarray(values, dtype=np.float64), -limit, limit)
    sigma = np.eye(d)
    for _ in range(sweeps):
        change = 0.0
        for (i, j), rho in zip(pairs, values, strict=False):
            idx = [int(i), int(j)]
            block = sigma[np.ix_(idx, idx)]
            change = max(
                change, abs(block[0, 1] - rho), abs(block[0, 0] - 1.0), abs(block[1, 1] - 1.0)
            )
            target = np.array([[1.0, rho], [rho, 1.0]])
            update = np.linalg.inv(target) - np.linalg.inv(block)  # the precision's change
            if not np.any(update):
                continue
            # Woodbury: (K + E U E^T)^-1 = S - S E U (I + E^T S E U)^-1 E^T S, E^T S E = block
            cols = sigma[:, idx]  # (d, 2)
            sigma = sigma - cols @ update @ np.linalg.solve(np.eye(2) + block @ update, cols.T)
            sigma = 0.5 * (sigma + sigma.T)
        if change < tol:
            break
    return correlation_from_covariance(nearest_psd(sigma, 1e-9))
