"""Sun et al. (2023): RoPE (interleaved pairs) with q_n scaled by zeta_m^(n / B) and k_m by zeta^(-m / B),
zeta_m = (2m / d + gamma) / (1 + gamma), gamma = 0.4, B = scale_base; then q . k / sqrt(d)."""
from relpos_core.schemes import xpos

from .common import Case, attend, content, rotate_pairs


def reference(q, k, v, params, qpos, kpos, causal):
    d, B, gamma = q.shape[-1], params["scale_base"], params["gamma"]
    theta = [10000.0 ** (-2.0 * m / d) for m in range(d // 2)]
    zeta = [(2 * m / d + gamma) / (1 + gamma) for m in range(d // 2)]
    qr = rotate_pairs(q, qpos, theta, pairing="interleaved", scale=lambda n, m: zeta[m] ** (n / B))
    kr = rotate_pairs(k, kpos, theta, pairing="interleaved", scale=lambda n, m: zeta[m] ** (-n / B))
    return attend(content(qr, kr), v, qpos, kpos, causal)


def make_params(H, d, k, generator):
    return dict(scale_base=8.0, gamma=0.4)  # a small B so that the decay shows at short distances


def term(p):
    return xpos.position_term(scale_base=p["scale_base"], gamma=p["gamma"])


def params_of(t):
    return dict(scale_base=t.rotary.decay.scale_base, gamma=t.rotary.decay.gamma)


CASES = {"xpos": Case(reference, make_params, term, params_of)}
