"""Su et al. (2021): rotate pair m of q_i by i theta_m and of k_j by j theta_m, theta_m = 10000^(-2m/d),
then q . k / sqrt(d) (rotate-half pairing: m with m + d/2)."""
from relpos_core.schemes import rope

from .common import Case, attend, content, rotate_pairs


def reference(q, k, v, params, qpos, kpos, causal):
    d = q.shape[-1]
    theta = [10000.0 ** (-2.0 * m / d) for m in range(d // 2)]
    return attend(content(rotate_pairs(q, qpos, theta), rotate_pairs(k, kpos, theta)), v, qpos, kpos, causal)


def make_params(H, d, k, generator):
    return {}


def term(p):
    return rope.position_term()


def params_of(t):
    return {}


CASES = {"rope": Case(reference, make_params, term, params_of)}
