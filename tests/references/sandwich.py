"""Chi et al. (2023), Sandwich: b_h(i - j) = H / (8 h) (p_i . p_j - d' / 2) with p the sinusoidal embeddings of
d' dimensions (p_i . p_j = sum_{k=1}^{d'/2} cos((i - j) / 10000^(2k / d'))), pair by pair, in float64."""
import math

import torch

from relpos_core.schemes import sandwich

from .common import Case, attend, content


def reference(q, k, v, params, qpos, kpos, causal):
    H, dims = params["H"], params["dims"]
    bias = torch.zeros(H, len(qpos), len(kpos), dtype=torch.float64)
    for i, qi in enumerate(qpos.tolist()):
        for j, kj in enumerate(kpos.tolist()):
            p = [math.sin(qi * 10000 ** (-2 * m / dims)) for m in range(1, dims // 2 + 1)] + \
                [math.cos(qi * 10000 ** (-2 * m / dims)) for m in range(1, dims // 2 + 1)]
            r = [math.sin(kj * 10000 ** (-2 * m / dims)) for m in range(1, dims // 2 + 1)] + \
                [math.cos(kj * 10000 ** (-2 * m / dims)) for m in range(1, dims // 2 + 1)]
            inner = sum(a * b for a, b in zip(p, r))  # the two embeddings' inner product
            for h in range(1, H + 1):
                bias[h - 1, i, j] = H / (8 * h) * (inner - dims / 2)
    return attend(content(q, k) + bias, v, qpos, kpos, causal)


def make_params(H, d, k, generator):
    return dict(H=H, dims=8)


def term(p):
    return sandwich.position_term(p["H"], dims=p["dims"])


def params_of(t):
    return dict(H=t.scalars[0].num_heads, dims=t.notes["dims"])


CASES = {"sandwich": Case(reference, make_params, term, params_of)}
