"""Income tax with the 2018 US single-filer brackets (divided by 12) and equal redistribution."""

from __future__ import annotations

import numpy as np

# Monthly lower edges of the brackets ($) and their marginal rates, as in EconAgent.
BRACKET_CUTOFFS = np.array([0.0, 808.33, 3289.58, 7016.67, 13393.75, 17008.33, 42525.0])
BRACKET_RATES = np.array([0.10, 0.12, 0.22, 0.24, 0.32, 0.35, 0.37])


def income_tax(income: np.ndarray) -> np.ndarray:
    """Tax on each monthly income: each bracket's rate applies to the part inside it."""
    widths = np.append(np.diff(BRACKET_CUTOFFS), np.inf)
    taxed = np.clip(np.asarray(income, dtype=float)[..., None] - BRACKET_CUTOFFS, 0.0, widths)
    return taxed @ BRACKET_RATES


def redistribute(taxes: np.ndarray) -> np.ndarray:
    """Each household's transfer: all tax collected, shared equally."""
    return np.full(taxes.shape, taxes.sum() / taxes.size)
