"""Absolute positions (Vaswani et al. 2017; learned tables as BERT): nothing enters attention itself.

The position vector is added to the token before the projections, so the attention call
is the plain one; ``tests/test_absolute.py`` checks the tables and the model.
"""
from .common import Case
from .none import make_params, params_of, reference, term

CASES = {"absolute": Case(reference, make_params, term, params_of),
         "learned": Case(reference, make_params, term, params_of)}
