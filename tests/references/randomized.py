"""Ruoss et al. (2023), randomised positions over RoPE (Su et al. 2021): the attention is RoPE's at
whatever positions the call gives (in training, sorted positions drawn from a longer range): rotate
pair m of q_i by p_i theta_m and of k_j by p_j theta_m, theta_m = 10000^(-2m/d), then q . k / sqrt(d)
(rotate-half pairing: m with m + d/2)."""
from relpos_core.schemes import randomized

from .common import Case
from .rope import reference  # the same attention: RoPE's, at the positions the call gives


def make_params(H, d, k, generator):
    return {}


def term(p):
    return randomized.position_term()


def params_of(t):
    return {}


CASES = {"randomized": Case(reference, make_params, term, params_of)}
