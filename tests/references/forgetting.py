"""Lin et al. (2025), eqs. 3-4: f_l = sigmoid(w_h . k_l + b_h) per head (the library's gate reads the key, see
schemes/forgetting.py) and logit_ij = q_i . k_j / sqrt(d) + sum over keys l with kpos_j < kpos_l <= qpos_i of
log f_l: pair by pair, one gate at a time."""
import torch

from relpos_core.schemes import forgetting

from .common import Case, attend, content, rnd


def reference(q, k, v, params, qpos, kpos, causal):
    w, b = params["weight"], params["bias"]  # (H, d), (H,)
    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    extra = torch.zeros(B, H, Lq, Lk, dtype=torch.float64)
    for bb in range(B):
        for h in range(H):
            log_f = [torch.log(1.0 / (1.0 + torch.exp(-(k[bb, h, t] @ w[h] + b[h])))) for t in range(Lk)]
            for i in range(Lq):
                for j in range(Lk):
                    if kpos[j] > qpos[i]:
                        continue  # masked: its bias is never read
                    extra[bb, h, i, j] = sum((log_f[t] for t in range(Lk) if kpos[j] < kpos[t] <= qpos[i]),
                                             torch.zeros((), dtype=torch.float64))
    return attend(content(q, k) + extra, v, qpos, kpos, causal)


def make_params(H, d, k, generator):
    return dict(weight=rnd(generator, H, d, s=0.5), bias=rnd(generator, H, s=1.0))


def term(p):
    return forgetting.position_term(p["weight"], p["bias"])


def params_of(t):
    piece = t.pieces[0]
    return dict(weight=piece.weight, bias=piece.bias)


CASES = {"forgetting": Case(reference, make_params, term, params_of)}
