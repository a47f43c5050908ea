"""Su et al. (2021): rotate pair m of q_i by i theta_m and of k_j by j theta_m, theta_m = 10000^(-2m/d),
then q . k / sqrt(d) (rotate-half pairing: m with m + d/2)."""
import math

import torch

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


# -- RoPE's options, written from their papers (tests/test_rope_options.py) ---------------------------------
def p_rope_theta(d, keep_fraction, *, rotary_dim=None, base=10000.0):
    """Barbero et al. (2024), p-RoPE: theta_m = base^(-2m/r) for the floor(p r/2) highest frequencies m, 0 for
    the lowest ones (they do not turn); the pairs of dimensions d >= r are not listed (never rotated)."""
    r = d if rotary_dim is None else rotary_dim
    kept = math.floor(keep_fraction * (r // 2) + 1e-9)
    return [base ** (-2.0 * m / r) if m < kept else 0.0 for m in range(r // 2)]


def p_rope_reference(q, k, v, qpos, kpos, causal, *, keep_fraction, rotary_dim=None, base=10000.0):
    """p-RoPE in float64: the first r dimensions rotated pair by pair (rotate-half within them), the rest as
    they are; then softmax(q . k / sqrt(d)) v."""
    d = q.shape[-1]
    r = d if rotary_dim is None else rotary_dim
    theta = p_rope_theta(d, keep_fraction, rotary_dim=rotary_dim, base=base)

    def turn(x, positions):
        return torch.cat([rotate_pairs(x[..., :r], positions, theta), x[..., r:]], dim=-1)

    return attend(content(turn(q, qpos), turn(k, kpos)), v, qpos, kpos, causal)


def length_factor(method, qpos_i, n_i, *, head=0, train_length=2048.0, floor_scale=8192.0, attn_scale=0.1, s=None):
    """One query's logit factor: Chiang and Cholak (2022) log n, normalised to log_{n_train} n; Nakanishi (2025)
    s_h log n; Llama 4's log(floor((t + 1) / floor_scale) + 1) attn_scale + 1 at the query's position t."""
    if method == "log_length":
        return math.log(max(n_i, 1)) / math.log(train_length)
    if method == "ssmax":
        return float(s[head]) * math.log(max(n_i, 1))
    return math.log(math.floor((qpos_i + 1) / floor_scale) + 1) * attn_scale + 1.0


def length_scaled_reference(q, k, v, qpos, kpos, causal, *, rotate=True, **scaling):
    """RoPE (or, rotate=False, NoPE) with every logit of query i multiplied by its factor, n_i the keys it
    attends (those at or before it when causal, else all), pair by pair."""
    d = q.shape[-1]
    if rotate:
        theta = [10000.0 ** (-2.0 * m / d) for m in range(d // 2)]
        q, k = rotate_pairs(q, qpos, theta), rotate_pairs(k, kpos, theta)
    logits = content(q, k).clone()  # (B, H, Lq, Lk)
    for i, t in enumerate(qpos.tolist()):
        n_i = sum(1 for p in kpos.tolist() if p <= t) if causal else len(kpos)
        for h in range(q.shape[1]):
            logits[:, h, i] *= length_factor(scaling["method"], t, n_i, head=h,
                                             **{n: x for n, x in scaling.items() if n != "method"})
    return attend(logits, v, qpos, kpos, causal)
