"""What the budget affords: the auto basis, the anchor pairs and picks, the data pass's degree.

All randomness is seeded (test mode), so each assertion is deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsmooth_spark.mechanisms.synthesizer import SynthesizerParams


def test_max_functions_caps_the_auto_basis():
    """At d = 30 and a large count, auto picks the pair terms of degree 3 (R = 3 x 435 = 1305); a
    cap of 500 keeps the largest affordable option within it (T_1 T_1 pairs: R = 435)."""
    from dpsmooth_spark.mechanisms.synthesizer import choose_basis
    from dpsmooth_spark.privacy.accountant import PrivacyAccountant

    accountant = PrivacyAccountant(1.0)
    free = choose_basis(SynthesizerParams(), 30, 1e8, accountant, 0.85)
    capped = choose_basis(SynthesizerParams(max_functions=500), 30, 1e8, accountant, 0.85)
    assert (free.size, capped.size) == (1305, 435)


def test_auto_basis_leaves_out_what_repeats_on_a_lattice():
    """Six columns, two of them booleans (2 levels) and one a category of 4: auto's degree-3 pair
    terms (45) without the 10 whose boolean factor is T_2 (= 1 on {-1, 1})."""
    from dpsmooth_spark.mechanisms.synthesizer import choose_basis
    from dpsmooth_spark.privacy.accountant import PrivacyAccountant

    accountant = PrivacyAccountant(1.0)
    lattice = np.array([78, 2, 4, 1826, 0, 2])
    full = choose_basis(SynthesizerParams(), 6, 2e4, accountant, 0.38)
    reduced = choose_basis(SynthesizerParams(), 6, 2e4, accountant, 0.38, lattice=lattice)
    assert (full.size, reduced.size) == (45, 35)
    assert not (reduced.indices[:, [1, 5]] >= 2).any()
    assert {tuple(i) for i in reduced.indices} < {tuple(i) for i in full.indices}


def test_auto_basis_drops_anchor_pairs_that_the_noise_would_swamp():
    """Five columns with a label anchor (4 pair terms): at 150 rows and epsilon 0.1 each term's
    noise (std 1.4 normalised) exceeds ANCHOR_NOISE_LIMIT, and the budget goes to the marginals;
    at epsilon 1 (std 0.14) the anchor pairs are measured."""
    from dpsmooth_spark.mechanisms.synthesizer import choose_basis
    from dpsmooth_spark.mechanisms.synthesizer.params import ANCHOR_NOISE_LIMIT, per_function_noise
    from dpsmooth_spark.privacy.accountant import PrivacyAccountant

    low, high = PrivacyAccountant(0.1), PrivacyAccountant(1.0)
    assert (
        per_function_noise(4, 150, low, 0.038)
        > ANCHOR_NOISE_LIMIT
        > per_function_noise(4, 150, high, 0.38)
    )
    assert choose_basis(SynthesizerParams(), 5, 150, low, 0.038, anchors=(4,)).size == 0
    assert choose_basis(SynthesizerParams(), 5, 150, high, 0.38, anchors=(4,)).size == 4


def test_anchor_picks_are_as_many_as_the_share_measures_at_the_noise_limit():
    """Where the anchor pairs are too noisy to measure all of them, ``anchor_picks`` picks as many
    as the basis share measures at ANCHOR_NOISE_LIMIT after the picks' share (public inputs):
    none at 150 rows and epsilon 0.1 (iris's regime: one pick's noise 0.84 normalised), one at
    569 (WDBC's: 0.22), more only where ``anchor_picks`` allows them, never all the anchor pairs,
    and none with ``anchor_picks: 0`` or a fixed basis."""
    from dpsmooth_spark.mechanisms.synthesizer.params import (
        ANCHOR_NOISE_LIMIT,
        ANCHOR_PICK_SELECTION,
        per_function_noise,
        pickable_anchor_pairs,
    )
    from dpsmooth_spark.privacy.accountant import PrivacyAccountant

    low, share = PrivacyAccountant(0.1), 0.038
    measure = share * (1.0 - ANCHOR_PICK_SELECTION)
    assert (
        per_function_noise(1, 150, low, measure)
        > ANCHOR_NOISE_LIMIT
        > per_function_noise(1, 569, low, measure)
    )
    default = SynthesizerParams()
    assert pickable_anchor_pairs(default, 30, 150, low, share) == 0
    assert pickable_anchor_pairs(default, 30, 569, low, share) == 1
    assert (
        pickable_anchor_pairs(SynthesizerParams(anchor_picks=8), 30, 1797, low, share) == 7
    )  # 0.5 / 0.069
    assert pickable_anchor_pairs(SynthesizerParams(anchor_picks=8), 3, 10**6, low, share) == 2
    assert pickable_anchor_pairs(SynthesizerParams(anchor_picks=0), 30, 10**6, low, share) == 0
    assert pickable_anchor_pairs(SynthesizerParams(basis="marginal"), 30, 10**6, low, share) == 0


@pytest.mark.parametrize(
    ("d", "params", "degree"),
    [
        (4, {}, 16),
        (11, {}, 16),
        (14, {}, 13),
        (31, {}, 6),
        (62, {}, 3),
        (200, {}, 3),
        (31, {"pair_factors": "chebyshev"}, 3),
        (200, {"factor_degree": 5}, 5),
        (31, {"basis": "pairwise", "degree": 8}, 8),
        (4, {"basis": "pairwise", "degree": 2}, 16),
    ],
)
def test_the_data_pass_reaches_the_spread_factors_degree_within_its_design_budget(
    d, params, degree
):
    """``factor_degree: null`` raises the Gram's degree for the spread factors as far as 16 while
    ``1 + d g`` stays within 192 design columns (191 // d by hand: 17 at 11 columns, 13 at 14, 6
    at 31, 3 at 62), never below the basis's own degree (3 for ``auto``, ``degree`` when fixed);
    the Chebyshev pair terms need only the basis's; an explicit degree is taken as given."""
    assert SynthesizerParams(**params).data_pass_degree(d) == degree
    assert SynthesizerParams(**params).pass_spec(d).degree == degree


def test_an_unaffordable_pair_basis_is_never_built(monkeypatch):
    """At 1,000 columns the pair basis has 499,500 to 1.5 million multi-indices of 1,000 entries
    (4 GB and more, which took the driver past 21 GB): where even its first-order pairs are too
    noisy it is not built, and the choice is the one the old code made (the empty basis),
    while at 30 columns, where pairs are affordable, it is built and chosen as before."""
    from dpsmooth_spark.mechanisms.synthesizer import choose_basis
    from dpsmooth_spark.mechanisms.synthesizer import params as params_module
    from dpsmooth_spark.privacy.accountant import PrivacyAccountant

    built = []
    real = params_module.build_basis
    monkeypatch.setattr(
        params_module,
        "build_basis",
        lambda kind, d, degree: built.append(d) or real(kind, d, degree),
    )
    accountant = PrivacyAccountant(1.0)
    wide = choose_basis(SynthesizerParams(), 1000, 1e5, accountant, 0.4)
    assert wide.size == 0 and built == []
    narrow = choose_basis(SynthesizerParams(), 30, 1e5, accountant, 0.4)
    assert narrow.size > 0 and built == [30, 30]
