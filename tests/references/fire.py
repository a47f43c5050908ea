"""Li et al. (2024), eq. (5) and their reference code: b_ij = f(psi(|i - j|) / (psi(max(L, i)) + eps)),
psi(x) = log(c x + 1), f an MLP 1 -> width -> H with a ReLU; added to q . k / sqrt(d)."""
import torch

from relpos_core.schemes import fire

from .common import Case, attend, content, pairwise, rnd


def reference(q, k, v, params, qpos, kpos, causal):
    c, L = params["c"].abs(), params["L"].abs()
    dist = torch.tensor(pairwise(qpos, kpos), dtype=torch.float64).abs()  # (Lq, Lk) |i - j|
    i = qpos.to(torch.float64)[:, None]  # (Lq, 1) the query's position
    psi_dist = torch.log(c * dist + 1)
    psi_norm = torch.log(c * torch.maximum(i, L) + 1) + fire.EPS
    x = psi_dist / psi_norm  # (Lq, Lk)
    hidden = torch.relu(x[..., None] * params["w1"] + params["b1"])  # (Lq, Lk, width)
    bias = (hidden @ params["w2"].t() + params["b2"]).permute(2, 0, 1)  # (H, Lq, Lk)
    return attend(content(q, k) + bias, v, qpos, kpos, causal)


def make_params(H, d, k, generator, width=6):
    return dict(w1=rnd(generator, width, s=1.0), b1=rnd(generator, width, s=0.5), w2=rnd(generator, H, width, s=0.5),
                b2=rnd(generator, H, s=0.5), c=torch.tensor(0.3, dtype=torch.float64),
                L=torch.tensor(float(max(2, k // 2)), dtype=torch.float64))


def term(p):
    return fire.position_term(p)


def params_of(t):
    return dict(zip(("w1", "b1", "w2", "b2", "c", "L"), t.scalars[0].params))


CASES = {"fire": Case(reference, make_params, term, params_of)}
