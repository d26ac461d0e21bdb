"""Auto bounds (noisy grid histograms) and auto values (Gaussian partition selection): what they
find, what they cost, and their audits (docs/privacy.md section 1c)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pytest
from pydantic import ValidationError
from scipy.stats import norm

from dpsmooth_spark import Synthesizer
from dpsmooth_spark.config import ColumnConfig, PrivacyConfig, parse_config
from dpsmooth_spark.core.columns import MAX_CATEGORIES
from dpsmooth_spark.core.quantile_grid import QuantileGrid, signed_exp, signed_log
from dpsmooth_spark.mechanisms.public_domains import (
    PublicDomains,
    dp_bounds,
    ordered_bounds,
    select_values,
    stage_budgets,
)
from dpsmooth_spark.pipeline.domains import UnresolvedBoundsError, domain_warnings
from dpsmooth_spark.privacy.accountant import PrivacyAccountant
from dpsmooth_spark.privacy.audit import beyond_both, clopper_pearson, epsilon_lower_bound
from dpsmooth_spark.privacy.noise import NoiseSource
from tests.unit.test_privacy_audit import runs_at


@dataclass(frozen=True)
class RecordingNoise(NoiseSource):
    """Seeded noise that keeps every noisy vector it returns (what the audit scores)."""

    outputs: list = field(default_factory=list)

    def laplace(self, values, scale):
        out = super().laplace(values, scale)
        self.outputs.append(out)
        return out


def test_grid_cells_agree_with_their_edges_and_the_log_grid_inverts():
    grid = QuantileGrid(-100.0, 3000.0, cells=64)
    x = np.concatenate([grid.linear_edges(), grid.log_edges(), np.linspace(-200, 4000, 999)])
    for cell_of, edges in (
        (grid.linear_cell, grid.linear_edges()),
        (grid.log_cell, grid.log_edges()),
    ):
        cells = cell_of(x)
        inside = np.clip(x, grid.low, grid.high)
        assert cells.min() >= 0 and cells.max() <= 63
        # a value lies in [edge[c], edge[c + 1]] of its cell (up to rounding at the edges)
        assert np.all(edges[cells] <= inside + 1e-9 * np.abs(inside).max())
        assert np.all(inside <= edges[cells + 1] + 1e-9 * np.abs(inside).max())
    u = np.linspace(-40, 40, 81)
    assert np.allclose(signed_log(signed_exp(u)), u)
    linear, log = grid.counts(np.array([1.0, np.nan, 2.0, 5000.0]))
    assert linear.sum() == log.sum() == 3  # NaN left out, 5000 clamped into the last cell


def _found(data, low, high, epsilon, seed, **kwargs):
    grid = QuantileGrid(low, high)
    accountant = PrivacyAccountant(epsilon)
    found = dp_bounds(
        "x",
        grid,
        *grid.counts(data),
        epsilon,
        accountant,
        NoiseSource(np.random.default_rng(seed)),
        **kwargs,
    )
    return found, accountant


def test_bounds_land_on_the_data_inside_a_range_100_times_wider():
    """5,000 normal values in a range 100 times their 6-sigma span, epsilon 0.1 for the column:
    over 20 seeded releases each range covers the 2%..98% quantiles and is at most 3 spans
    wide (a false failure needs a noise draw beyond the thresholds' 5% false-cell rate in most
    readings at once: below 1e-6 per release)."""
    rng = np.random.default_rng(0)
    data = rng.normal(50.0, 1.0, 5000)
    span = 6.0
    for seed in range(20):
        found, accountant = _found(data, 50 - 50 * span, 50 + 50 * span, 0.1, seed)
        assert found.lower <= np.quantile(data, 0.02) and found.upper >= np.quantile(data, 0.98)
        assert found.upper - found.lower <= 3 * span, found
        assert accountant.spent_epsilon() == pytest.approx(0.1)
        assert {c.stage for c in accountant.charges} == {"bounds:x:linear", "bounds:x:log"}


def test_bounds_of_a_skewed_column_use_the_log_grid_and_a_declared_bound_is_kept():
    rng = np.random.default_rng(1)
    amounts = np.exp(rng.normal(5.0, 0.8, 20_000))  # about 20 to 2,000 in a range up to 10^7
    found, _ = _found(amounts, 0.0, 1e7, 0.05, 3, fixed=(0.0, None))
    assert found.lower == 0.0 and found.grid.startswith("log")
    assert np.quantile(amounts, 0.97) <= found.upper <= 4 * amounts.max()


def test_no_cell_above_the_noise_leaves_the_public_range():
    found, _ = _found(np.array([1.0, 2.0, 3.0]), -1e6, 1e6, 0.01, 0)
    assert (found.lower, found.upper, found.grid) == (-1e6, 1e6, "none")


def test_the_found_bounds_state_the_share_they_clamp():
    """Student-t tails (3 degrees of freedom) in a range 100 times their spread: the found
    bounds' stated share outside them is within 0.01 of the share of the rows they clamp, for
    each of 20 seeds (the noise at epsilon 1 on 20,000 rows moves the share by under 0.5%, its
    stated noise std; seeded). A share above 1% by more than twice its noise is warned of;
    nothing is stated where no cell was kept."""
    data = np.random.default_rng(5).standard_t(3, 20_000)
    for seed in range(20):
        found, _ = _found(data, -500.0, 500.0, 1.0, seed)
        clamped = float(np.mean((data < found.lower) | (data > found.upper)))
        assert found.outside is not None and abs(found.outside - clamped) < 0.01, (found, clamped)
        assert found.outside_std is not None and found.outside_std < 0.005
    lax = PrivacyConfig(epsilon=1.0, unresolved_bounds="range")
    wide = PublicDomains((replace(found, outside=0.025, outside_std=0.002),))
    assert any("2.5%" in w for w in domain_warnings(wide, lax))
    assert domain_warnings(PublicDomains((replace(found, outside=0.004),)), lax) == []
    noisy = PublicDomains((replace(found, outside=0.16, outside_std=0.5),))
    assert domain_warnings(noisy, lax) == []  # within its noise of no clamping: not stated
    none, _ = _found(np.array([1.0, 2.0, 3.0]), -1e6, 1e6, 0.01, 0)
    assert none.outside is None and not none.resolved


def test_an_unresolved_bound_stops_the_release_unless_the_range_is_chosen():
    """No cell above the noise: the error names the column, the spend and what to do; with
    ``unresolved_bounds: range`` the range's ends stand, with a warning."""
    found, _ = _found(np.array([1.0, 2.0, 3.0]), -1e6, 1e6, 0.01, 0)
    domains = PublicDomains((found,))
    with pytest.raises(UnresolvedBoundsError) as err:
        domain_warnings(domains, PrivacyConfig(epsilon=0.5))
    message = str(err.value)
    assert "['x']" in message and "epsilon 0.5" in message and "unresolved_bounds: range" in message
    warnings = domain_warnings(domains, PrivacyConfig(epsilon=0.5, unresolved_bounds="range"))
    assert len(warnings) == 1 and "ends of the public range" in warnings[0]


def test_ordered_bounds_round_integers_outwards_and_never_collapse():
    grid = QuantileGrid(0.0, 100.0, cells=10)
    assert ordered_bounds(3.2, 7.8, grid, integer=True) == (3.0, 8.0)
    assert ordered_bounds(5.0, 5.0, grid, integer=True) == (5.0, 6.0)
    assert ordered_bounds(40.0, 30.0, grid, integer=False) == (
        40.0,
        50.0,
    )  # a declared upper < lower
    assert ordered_bounds(100.0, 100.0, grid, integer=False) == (90.0, 100.0)


def _bounds_outputs(data, budget, runs, seed):
    grid = QuantileGrid(-10.0, 10.0, cells=32)
    noise = RecordingNoise(np.random.default_rng(seed))
    for _ in range(runs):
        dp_bounds("x", grid, *grid.counts(data), budget, PrivacyAccountant(10.0), noise)
    out = np.array(noise.outputs).reshape(runs, 2, grid.cells)
    return out.reshape(runs, -1), np.concatenate(grid.counts(data)).astype(float)


def test_bounds_audit_holds_at_its_budget_and_catches_a_half_noise_mutant():
    """D' adds one row at 7.3: one cell of each grid moves by 1. The released histograms (what
    every bound is computed from) certify at most the stage's epsilon of 1 and most of it; at
    half the noise (a mutant that takes twice the budget it is charged) they certify more
    (Clopper-Pearson, alpha 1e-3: false-failure rate <= 1e-3 for a fresh seed; seeded here)."""
    rng = np.random.default_rng(2)
    base = rng.uniform(-3, 3, 200)
    bounds = {}
    # the mutant's loss is twice epsilon: a quarter of the runs shows it (certified: 1.36)
    for name, factor in (("right", 1.0), ("half noise", 2.0)):
        runs = runs_at(factor, 12_000)
        out_d, truth_d = _bounds_outputs(base, factor, runs, 11)
        out_p, truth_p = _bounds_outputs(np.append(base, 7.3), factor, runs, 12)
        score_d = beyond_both(out_d, truth_d, truth_p)
        score_p = beyond_both(out_p, truth_d, truth_p)
        bounds[name] = epsilon_lower_bound(score_d, score_p, np.array([0.0, 0.5, 1.0]), 1e-3)
    assert 0.7 < bounds["right"] <= 1.0, bounds
    assert bounds["half noise"] > 1.0, bounds


def _selection(counts, delta, seed, runs, mutant=False, unit_rows=1):
    """How often each value is released over ``runs`` selections at rho 0.05; the mutant sets
    its threshold for half the noise it adds."""
    rng = np.random.default_rng(seed)
    released = dict.fromkeys(counts, 0)
    for _ in range(runs):
        accountant = PrivacyAccountant(1.0, 0.5, unit_rows=unit_rows, selection_delta=delta)
        sigma = accountant.noise_scale(1.0, 0.05)
        noise = NoiseSource(rng)
        if mutant:  # the threshold of sigma / 2 with the noise of sigma
            noise = _ScaledNoise(rng)
        found = select_values("c", counts, "other", 0.05, delta, accountant, noise)
        for v in found.values[:-1]:
            released[v] += 1
    return released, sigma


@dataclass(frozen=True)
class _ScaledNoise(NoiseSource):
    def gaussian(self, values, scale):
        return super().gaussian(values, 2.0 * scale)


@pytest.mark.parametrize("unit_rows", [1, 4])
def test_selection_releases_a_value_only_the_added_unit_has_at_most_delta(unit_rows):
    """D' adds a unit whose rows all carry a new value (count k). Over 20,000 seeded selections
    with delta 0.01 its release rate is not certified above delta (Clopper-Pearson, alpha 1e-3:
    false-failure rate <= 1e-3 for a fresh seed); a mutant whose threshold assumes half the noise
    it adds releases it far more often (certified above delta)."""
    delta, runs = 0.01, 20_000
    counts = {"common": 5000, "new": unit_rows}
    rates = {}
    for name, mutant in (("right", False), ("half noise", True)):
        released, _ = _selection(counts, delta, 5, runs, mutant, unit_rows)
        assert released["common"] == runs
        rates[name] = clopper_pearson(released["new"], runs, 1e-3)
    assert rates["right"][0] <= delta, rates
    assert rates["half noise"][0] > delta, rates


def test_selection_finds_frequent_values_keeps_other_last_and_charges_rho_and_delta():
    rng = np.random.default_rng(3)
    counts = {f"v{i}": int(c) for i, c in enumerate(rng.integers(1, 40, 400))}
    tops = MAX_CATEGORIES + 44  # more than the domain can hold
    counts.update({f"top{i}": 1000 + i for i in range(tops)})
    accountant = PrivacyAccountant(1.0, 1e-6, selection_delta=5e-7)
    rho = stage_budgets(accountant, 0.1, 1)
    found = select_values("c", counts, "OTHER", rho, 5e-7, accountant, NoiseSource(rng))
    assert found.values[-1] == "OTHER" and len(found.values) == MAX_CATEGORIES
    assert set(found.values[:-1]) <= {f"top{i}" for i in range(tops)} and found.truncated == 45
    sigma = found.noise_std
    assert found.threshold == pytest.approx(1 + sigma * norm.isf(5e-7))
    (charge,) = accountant.charges
    assert charge.rho == pytest.approx(rho) and charge.delta == 5e-7
    with pytest.raises(RuntimeError, match="delta set aside"):
        select_values("d", counts, "OTHER", rho, 5e-7, accountant, NoiseSource(rng))
    with pytest.raises(ValueError, match="delta"):
        select_values("c", counts, "OTHER", 0.1, 0.0, PrivacyAccountant(1.0), NoiseSource(rng))


def test_the_domains_share_comes_off_the_top_and_selection_delta_off_the_conversion():
    plain = PrivacyAccountant(1.0, 1e-6)
    with_selection = PrivacyAccountant(1.0, 1e-6, selection_delta=5e-7)
    assert with_selection.total_rho < plain.total_rho
    accountant = PrivacyAccountant(2.0)
    assert stage_budgets(accountant, 0.1, 4) == pytest.approx(0.05)
    accountant.available = 0.9
    assert accountant.share(0.5) == pytest.approx(0.9) and accountant.whole_share(0.5) == 1.0
    again = PrivacyAccountant.from_dict(with_selection.to_dict())
    assert again.selection_delta == 5e-7 and again.total_rho == with_selection.total_rho
    domains = PublicDomains.from_dict(
        {
            "bounds": [
                {
                    "column": "x",
                    "lower": 0.0,
                    "upper": 2.0,
                    "grid": "log/64",
                    "threshold": 3.0,
                    "scale": 1.0,
                }
            ],
            "values": [],
        }
    )
    assert PublicDomains.from_dict(domains.to_dict()) == domains


def test_auto_declarations_are_validated():
    assert ColumnConfig(name="a", lower="auto", upper="auto", range=[0, 10]).auto_bounds
    assert ColumnConfig(name="a", lower=0, upper="auto", range=[0, 10]).auto_bounds
    assert ColumnConfig(name="c", values="auto", other="zz").auto_values
    for bad, message in (
        ({"lower": "auto"}, "both lower and upper"),
        ({"lower": 0, "upper": 1, "range": [0, 2]}, "range goes with"),
        ({"lower": "auto", "upper": "auto", "range": [3, 1]}, "a < b"),
        ({"values": "auto"}, "go together"),
        ({"values": [1, 2], "other": 1}, "go together"),
        ({"lower": "auto", "upper": "2020-01-01", "range": [0, 5]}, "numbers or both dates"),
    ):
        with pytest.raises(ValidationError, match=message):
            ColumnConfig(name="a", **bad)
    config = {
        "input": {"path": "in.parquet"},
        "columns": [{"name": "c", "values": "auto", "other": "zz"}],
        "privacy": {"epsilon": 1.0},
        "output": {"path": "out"},
    }
    with pytest.raises(ValueError, match=r"needs privacy.delta > 0"):
        parse_config(config)
    config["privacy"]["delta"] = 1e-6
    assert parse_config(config).privacy.domain_fraction == 0.1


def test_the_library_finds_auto_domains_before_its_statistics():
    rng = np.random.default_rng(4)
    n = 20_000
    codes = rng.choice(
        np.array([f"c{i}" for i in range(60)]), n, p=np.r_[[0.5], np.full(59, 0.5 / 59)]
    )
    codes[:40] = [f"rare{i}" for i in range(40)]  # 40 values seen once: never released
    table = pa.table({"amount": rng.gamma(2.0, 50.0, n), "code": codes})
    columns = [
        {"name": "amount", "lower": 0.0, "upper": "auto", "range": [0, 1e6]},
        {"name": "code", "values": "auto", "other": "OTHER"},
    ]
    synth = Synthesizer(columns, 1.0, delta=1e-6, random_state=0).fit(table)
    found = synth.domains_
    upper = found.range_of("amount").upper
    assert (
        np.quantile(table["amount"].to_numpy(), 0.99)
        <= upper
        <= 4 * table["amount"].to_numpy().max()
    )
    values = found.domain("code").values
    assert (
        "c0" in values and values[-1] == "OTHER" and not any(v.startswith("rare") for v in values)
    )
    out = synth.sample(5000)
    assert set(out["code"].to_pylist()) <= set(values)
    assert out["amount"].to_numpy().max() <= upper
    stages = [c.stage for c in synth.accountant_.charges]
    assert stages[:3] == ["bounds:amount:linear", "bounds:amount:log", "values:code"]
    assert synth.accountant_.spent_epsilon() == pytest.approx(1.0)
