"""No position: softmax(q . k / sqrt(d)) v (Vaswani et al. 2017 without position vectors)."""
from .common import Case, attend, content


def reference(q, k, v, params, qpos, kpos, causal):
    return attend(content(q, k), v, qpos, kpos, causal)


def make_params(H, d, k, generator):
    return {}


def term(params):
    return None


def params_of(term):
    return {}


CASES = {"none": Case(reference, make_params, term, params_of)}
