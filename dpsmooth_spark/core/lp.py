"""The reduced LP of Algorithm 3 step 20: ``min ||W u - b||_1`` s.t. ``u >= 0``, ``sum u = 1``.

Solved with OR-Tools (GLOP by default) in the standard form
``W u + p - q = b``, ``1^T u = 1``, ``u, p, q >= 0``, objective ``1^T (p + q)``.
The model is filled from a sparse matrix in one call, so building it costs no Python loop.

For many candidates the LP is solved by column generation: solve on an active subset of the
candidates, price every candidate with the duals (reduced cost ``-(W_j^T y + z)``), add the most
negative ones, repeat until none is negative. The result is optimal for the full LP; the solver
only ever sees a few times R columns (the optimum has at most R + 1 non-zero weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp


class LPError(RuntimeError):
    """The solver did not return an optimal solution."""


@dataclass(frozen=True)
class L1Fit:
    """Solution of the L1 fit.

    Attributes:
        weights: ``(C,)`` probability vector ``u``.
        objective: ``||W u - b||_1`` at the solution.
        solver: name of the OR-Tools backend.
        status: solver status string.
        rounds: LP solves (1 without column generation).
        columns_used: candidates the solver saw.
    """

    weights: np.ndarray
    objective: float
    solver: str
    status: str
    rounds: int = 1
    columns_used: int = 0


def solve_l1_fit(
    w: np.ndarray,
    b: np.ndarray,
    solver: str = "glop",
    time_limit_s: float | None = None,
    column_generation: bool | None = None,
    max_rounds: int = 100,
) -> L1Fit:
    """Find the distribution over the C columns of ``w`` whose moments best match ``b`` in L1.

    Args:
        w: ``(R, C)`` basis values at the candidates.
        b: ``(R,)`` target (noisy, normalised) basis answers.
        solver: an OR-Tools LP backend name (``glop``, ``pdlp``, ``clp`` where built in).
        time_limit_s: optional time limit per solve.
        column_generation: price candidates instead of solving on all of them; default when
            ``C > 8 (R + 1)`` (measured: faster there, slower for C close to R).
        max_rounds: column-generation rounds before giving up (then the best restricted optimum).
    """
    r, c = w.shape
    if b.shape != (r,):
        raise ValueError(f"b must have shape ({r},), got {b.shape}")
    if column_generation is None:
        column_generation = c > 8 * (r + 1)
    if not column_generation:
        weights, objective, status, _ = _solve(w, b, solver, time_limit_s)
        return L1Fit(weights, objective, solver, status, 1, c)
    active = np.unique(np.linspace(0, c - 1, min(c, 2 * (r + 1))).astype(int))
    batch = r + 1
    for rounds in range(1, max_rounds + 1):  # noqa: B007 (the count is returned)
        sub, objective, status, duals = _solve(w[:, active], b, solver, time_limit_s)
        reduced = -(w.T @ duals[:r] + duals[r])
        reduced[active] = 0.0
        entering = np.argsort(reduced)[:batch]
        entering = entering[reduced[entering] < -1e-9]
        if entering.size == 0:
            break
        active = np.concatenate([active, entering])
    weights = np.zeros(c)
    weights[active] = sub
    return L1Fit(
        weights, float(np.abs(w @ weights - b).sum()), solver, status, rounds, int(active.size)
    )


def _solve(
    w: np.ndarray, b: np.ndarray, solver: str, time_limit_s: float | None
) -> tuple[np.ndarray, float, str, np.ndarray]:
    """One LP solve: (weights, objective, status, duals of the R rows and the sum row)."""
    # imported here: OR-Tools takes over a second to import, which every CLI command that never
    # solves an LP would pay (config imports this module through mechanisms.smooth_grid)
    from ortools.linear_solver.python import model_builder as mb

    r, c = w.shape
    eye = sp.identity(r, format="csr")
    top = sp.hstack([sp.csr_matrix(w), eye, -eye])
    bottom = sp.hstack([sp.csr_matrix(np.ones((1, c))), sp.csr_matrix((1, 2 * r))])
    matrix = sp.vstack([top, bottom], format="csr").astype(np.float64)
    rhs = np.concatenate([b, [1.0]]).astype(np.float64)
    nvar = c + 2 * r
    model = mb.Model()
    # OR-Tools' stubs declare ndarray[float64, ...], which no numpy array type matches.
    helper: Any = model.helper
    helper.fill_model_from_sparse_data(
        np.zeros(nvar),
        np.full(nvar, np.inf),
        np.concatenate([np.zeros(c), np.ones(2 * r)]),
        rhs,
        rhs,
        matrix,
    )
    engine = mb.Solver(solver)
    if not engine.solver_is_supported():
        raise LPError(f"OR-Tools solver {solver!r} is not available")
    if time_limit_s is not None:
        engine.set_time_limit_in_seconds(time_limit_s)
    status = engine.solve(model)
    if status != mb.SolveStatus.OPTIMAL:
        raise LPError(f"LP solver {solver!r} returned {status.name}")
    values = engine.values(model.get_variables()).to_numpy()
    u = np.maximum(values[:c], 0.0)
    total = u.sum()
    if not total > 0:
        raise LPError("LP returned an empty distribution")
    u /= total
    duals = engine.dual_values(model.get_linear_constraints()).to_numpy()
    return u, float(np.abs(w @ u - b).sum()), status.name, duals
