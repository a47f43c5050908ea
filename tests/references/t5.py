"""Raffel et al. (2020): logit q . k (unscaled) + table[bucket(j - i), h]; buckets as Mesh TensorFlow's
(exactness of the buckets themselves is tested against Hugging Face in tests/test_t5.py)."""
import torch

from relpos_core.schemes import t5

from .common import Case, attend, pairwise, rnd


def reference(q, k, v, params, qpos, kpos, causal):
    table = params["table"]  # (num_buckets, H)
    off = torch.tensor(pairwise(qpos, kpos))
    buckets = t5.t5_relative_bucket(off, bidirectional=params["bidirectional"], num_buckets=table.shape[0],
                                    max_distance=params["max_distance"])  # (Lq, Lk)
    bias = table[buckets].permute(2, 0, 1)  # (H, Lq, Lk)
    return attend(q @ k.transpose(-2, -1) + bias, v, qpos, kpos, causal)  # T5: unscaled


def make_params(H, d, k, generator):
    return dict(table=rnd(generator, 8, H, s=1.0), bidirectional=True, max_distance=max(k, 3))


def term(p):
    return t5.position_term(p["table"], bidirectional=p["bidirectional"], max_distance=p["max_distance"])


def params_of(t):
    return dict(table=t.scalars[0].table.t(), bidirectional=t.notes["bidirectional"],
                max_distance=t.notes["max_distance"])


CASES = {"t5": Case(reference, make_params, term, params_of)}
