"""Chi et al. (2022), eqs. for the log and power kernels: q . k / sqrt(d) - r1 log(1 + r2 |i - j|), or
- r1 |i - j|^r2 (0 < r2 <= 2); r1, r2 > 0 per head (here drawn away from the clamps)."""
import torch

from relpos_core.schemes import kerple_log

from .common import Case, attend, content, pairwise


def _reference(kernel):
    def reference(q, k, v, params, qpos, kpos, causal):
        r1, r2 = params["r1"][:, None, None], params["r2"][:, None, None]  # (H, 1, 1)
        dist = torch.tensor(pairwise(qpos, kpos), dtype=torch.float64).abs()  # (Lq, Lk) |i - j|
        if kernel == "log":
            bias = -r1 * torch.log(1 + r2 * dist)
        else:  # |i - j|^r2 is 0 at distance 0; written so that its gradient there is 0, not 0 * log 0
            far = dist > 0
            bias = -r1 * torch.where(far, torch.where(far, dist, torch.ones_like(dist)) ** r2, torch.zeros_like(dist))
        return attend(content(q, k) + bias, v, qpos, kpos, causal)

    return reference


def make_params(H, d, k, generator, kernel="log"):
    r1 = 0.1 + 1.8 * torch.rand(H, generator=generator, dtype=torch.float64)
    r2 = 0.1 + 0.8 * torch.rand(H, generator=generator, dtype=torch.float64)
    if kernel == "power":
        r2 = r2 * 2
    return dict(r1=r1, r2=r2, kernel=kernel)


def term(p):
    return kerple_log.position_term(p["r1"], p["r2"], kernel=p["kernel"])


def params_of(t):
    r1, r2 = t.scalars[0].params
    return dict(r1=r1, r2=r2, kernel=t.notes["kernel"])


CASES = {"kerple_log": Case(_reference("log"), make_params, term, params_of),
         "kerple_power": Case(_reference("power"), lambda H, d, k, g: make_params(H, d, k, g, "power"), term,
                              params_of)}
