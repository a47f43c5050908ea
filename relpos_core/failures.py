"""Failure modes of relative position encodings, and the small checks that catch them.

Book: "Failure modes" (chapters/12_failure_modes.ipynb), which shows each one
failing and then fixed. The other two failure modes of that chapter need no helper here:
a materialised bias that would run out of memory is refused by ``rp.attend``'s memory
guard (``relpos_core.measure.guard``), and a silent SDPA fallback is caught by
``relpos_core.measure.backends`` (``detect_sdpa_backend``, ``force_sdpa_backend``).

* ``two_token_sign_test``: a flipped sign convention (j - i where the checkpoint expects
  i - j, or the reverse) swaps past and future. Two tokens are enough to see it: the
  key before the query has offset -1 in ``key_minus_query`` and +1 in
  ``query_minus_key`` (``relpos_core.schemes.SIGN_CONVENTIONS`` has every scheme's row).
* ``bias_table_names``: T5 keeps one bias table per stack, owned by the first block
  (Raffel et al. 2020); a table in every block changes the parameter count and leaves
  checkpoint keys missing. This lists the tables a module owns.
* ``distance_probe``: clipping (Shaw et al. 2018) and T5's last bucket make every
  distance beyond a limit look the same. The probe places one target key at a chosen
  distance among identical filler keys and reads the attention weight on it.
* ``read_reference``: the GPU reference data (JSON lines with a provenance record first).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch

from relpos_core._validate import check_choice, check_int, check_positive_int, check_tensor
from relpos_core.budget import check_memory

__all__ = [
    "SignConventionError",
    "SignTest",
    "two_token_sign_test",
    "bias_table_names",
    "distance_probe",
    "read_reference",
    "REFERENCE",
]

BEFORE_OFFSET = {"key_minus_query": -1, "query_minus_key": 1}  # the key before the query: j - i = -1, i - j = +1


class SignConventionError(ValueError):
    """An implementation's bias gives the key before the query the value of another offset."""


@dataclass(frozen=True)
class SignTest:
    """The result of ``two_token_sign_test``: what the implementation gave, what it should give.

    ``*_before``: query at position 1, key at 0 (the key comes before the query);
    ``*_after``: query at 0, key at 1; ``*_same``: query and key at the same position.
    Each value has the bias's shape without its last two dimensions (e.g. (H,)).
    """

    scheme: str
    convention: str
    got_before: torch.Tensor
    got_after: torch.Tensor
    got_same: torch.Tensor
    want_before: torch.Tensor
    want_after: torch.Tensor
    want_same: torch.Tensor
    rtol: float = 1e-5
    atol: float = 1e-6

    def _eq(self, a, b) -> bool:
        return bool(torch.allclose(a, b, rtol=self.rtol, atol=self.atol))

    @property
    def passed(self) -> bool:
        """Before, after and the diagonal all match the convention's values."""
        return (self._eq(self.got_before, self.want_before) and self._eq(self.got_after, self.want_after)
                and self._eq(self.got_same, self.want_same))

    @property
    def swapped(self) -> bool:
        """Past and future exchanged (the sign flip), the diagonal right."""
        return (self._eq(self.got_before, self.want_after) and self._eq(self.got_after, self.want_before)
                and self._eq(self.got_same, self.want_same))

    @property
    def verdict(self) -> str:
        """"passed", "past and future swapped" or "wrong values" (some other bug)."""
        return "passed" if self.passed else "past and future swapped" if self.swapped else "wrong values"

    def message(self) -> str:
        """One sentence for a test report or an error."""
        offset = BEFORE_OFFSET[self.convention]
        formula = "j - i" if self.convention == "key_minus_query" else "i - j"
        if self.passed:
            return (f"{self.scheme}: passed; the key before the query reads offset {offset:+d} "
                    f"({self.convention}, {formula})")
        if self.swapped:
            return (f"{self.scheme}: past and future swapped; the key before the query gets the value of offset "
                    f"{-offset:+d}, but {self.scheme} uses {self.convention} ({formula}), where it is {offset:+d}: "
                    f"flip the sign of the offset")
        return (f"{self.scheme}: wrong values, not a plain sign flip; the two-token bias matches neither "
                f"{self.convention} ({formula}) nor its mirror image")

    def check(self) -> "SignTest":
        """Raise ``SignConventionError`` (a ValueError) unless the test passed; returns self."""
        if not self.passed:
            raise SignConventionError(self.message())
        return self


def two_token_sign_test(
    bias: torch.Tensor,
    *,
    scheme: str,
    value_at_offset: Callable[[int], torch.Tensor | float],
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> SignTest:
    """Check an implementation's relative bias on two tokens against a scheme's convention.

    ``bias``: (..., 2, 2), what the implementation under test adds to the logits for
    queries (rows) and keys (columns) at positions 0 and 1, before any causal mask
    (e.g. (H, 2, 2)). ``scheme``: a row of ``relpos_core.schemes.SIGN_CONVENTIONS``,
    which gives the convention. ``value_at_offset(r)``: the bias the checkpoint (or the
    paper) gives the signed offset ``r`` *in that convention*, shaped like
    ``bias[..., 0, 0]`` or broadcastable to it: for T5 (``key_minus_query``)
    ``table[bucket(r)]``, for ALiBi (``query_minus_key``) ``-m * r``.

    Raises ValueError when the test could not see a flip: when the reference gives the
    key before and the key after the query the same value (a symmetric bias), use a
    table whose rows differ.
    """
    check_tensor("bias", bias, floating=True)
    if bias.dim() < 2 or tuple(bias.shape[-2:]) != (2, 2):
        raise ValueError(f"bias must have shape (..., 2, 2) (two queries, two keys), got {tuple(bias.shape)}")
    from relpos_core.schemes import sign_convention

    convention = sign_convention(scheme)["convention"]
    if convention not in BEFORE_OFFSET:
        raise ValueError(f"scheme must use a relative offset ({list(BEFORE_OFFSET)}); {scheme!r} has {convention!r}")
    if not callable(value_at_offset):
        raise ValueError(f"value_at_offset must be callable (offset -> value), got {type(value_at_offset).__name__}")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
            raise ValueError(f"{name} must be a number in [0, 1), got {tol!r}")
    got = bias.detach().to(torch.float64)
    shape = got.shape[:-2]

    def want(offset: int) -> torch.Tensor:
        try:
            value = torch.as_tensor(value_at_offset(offset)).detach().to(device=got.device, dtype=torch.float64)
        except (TypeError, RuntimeError) as err:
            raise ValueError(f"value_at_offset({offset}) must return a number or a tensor, got an error: {err}") from err
        try:
            return torch.broadcast_to(value, shape).clone()
        except RuntimeError:
            raise ValueError(f"value_at_offset({offset}) must broadcast to the bias's leading shape {tuple(shape)}, "
                             f"got shape {tuple(value.shape)}") from None

    before = BEFORE_OFFSET[convention]
    want_before, want_after, want_same = want(before), want(-before), want(0)
    if torch.allclose(want_before, want_after, rtol=rtol, atol=atol):
        raise ValueError("value_at_offset gives offsets +1 and -1 the same value, so a sign flip would pass "
                         "unseen; test with a table whose rows differ (e.g. torch.arange)")
    # rows are queries at 0, 1 and columns keys at 0, 1
    return SignTest(scheme=scheme, convention=convention, got_before=got[..., 1, 0], got_after=got[..., 0, 1],
                    got_same=got[..., 0, 0], want_before=want_before, want_after=want_after, want_same=want_same,
                    rtol=rtol, atol=atol)


def bias_table_names(module: torch.nn.Module, *, suffix: str = "relative_attention_bias.weight") -> list[str]:
    """Names of the parameters of ``module`` that are relative bias tables (T5's by default).

    Works for relpos_core's ``T5EncoderStack`` and Hugging Face's T5 models alike: a
    correct stack owns exactly one (in its first block), an encoder-decoder two.
    """
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(suffix, str) or not suffix:
        raise ValueError(f"suffix must be a non-empty string, got {suffix!r}")
    return [name for name, _ in module.named_parameters() if name.endswith(suffix)]


def distance_probe(
    term,
    distances: Sequence[int],
    *,
    seq_len: int,
    head_dim: int,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float64,
    form: str | None = None,
    backend: str = "eager",
) -> torch.Tensor:
    """Attention weight on one target key at each distance: (len(distances), H).

    One query at the last of ``seq_len`` positions (a decoder step) attends to
    ``seq_len`` keys: every key is the same filler vector except one target, placed
    ``distance`` positions before the query (0 is the query's own position). Only the
    target's position changes between rows, so a scheme that gives two distances the
    same weight cannot tell them apart. q, the filler and the target are random (one
    per head, from ``generator``); the values are 1 for the target and 0 elsewhere, so
    ``rp.attend``'s output is the weight itself. ``term`` must have no value term (it
    would add to that output): pass Shaw's key table only.
    """
    from relpos_core.attend import attend
    from relpos_core.terms import PositionTerm

    if not isinstance(term, PositionTerm):
        raise ValueError(f"term must be a PositionTerm (from a scheme's position_term), got {type(term).__name__}")
    if term.value is not None:
        raise ValueError(f"term must have no value term ({term.value.name} adds to the output the probe reads): "
                         f"build it with the key table only")
    seq_len = check_positive_int("seq_len", seq_len, max_value=2**16)
    head_dim = check_positive_int("head_dim", head_dim, max_value=4096)
    check_choice("dtype", dtype, (torch.float32, torch.float64))
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    distances = [check_int("distances[i]", r, min_value=0, max_value=seq_len - 1) for r in distances]
    if not distances:
        raise ValueError("distances must hold at least one distance in [0, seq_len - 1], got none")
    heads = [p.heads for p in term.all_pieces if p.heads is not None]  # the head count a piece's tensors fix
    H = heads[0] if heads else 1
    n = len(distances)
    element = torch.empty((), dtype=dtype).element_size()
    check_memory(2 * n * H * seq_len * head_dim * element, what="distance_probe (keys and values, one row per "
                 "distance)", shape=(n, H, seq_len, head_dim), dtype=dtype,
                 alternative="fewer distances per call")
    q, filler, target = (torch.randn(H, head_dim, generator=generator, dtype=torch.float64).to(dtype)
                         for _ in range(3))  # (H, d) each
    keys = filler[None, :, None, :].repeat(n, 1, seq_len, 1)  # (n, H, L, d)
    values = torch.zeros(n, H, seq_len, head_dim, dtype=dtype)  # (n, H, L, d)
    for row, r in enumerate(distances):
        keys[row, :, seq_len - 1 - r] = target
        values[row, :, seq_len - 1 - r, 0] = 1.0
    queries = q[None, :, None, :].expand(n, H, 1, head_dim)  # (n, H, 1, d)
    out = attend(queries, keys, values, term, form=form, backend=backend, causal=True)  # (n, H, 1, d)
    return out[:, :, 0, 0]  # (n, H): the weight on the target


#: the GPU reference data shipped with the package (relpos_core/data/README.md)
REFERENCE = "h200-2026-11-30.jsonl"


def read_reference(path: str | Path | None = None) -> tuple[dict, list[dict]]:
    """(provenance, records) from a JSON-lines file whose first line is ``{"provenance": {...}}``;
    default: the H200 reference data shipped with the package (``REFERENCE``, found by
    ``relpos_core.resources``)."""
    if path is None:
        from relpos_core import resources

        path = resources.path(REFERENCE)
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path must be an existing JSON-lines file, got {str(path)!r}")
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{path} is empty: expected a provenance line, then one record per line")
    first = json.loads(lines[0])
    if not isinstance(first, dict) or "provenance" not in first:
        raise ValueError(f"{path}: the first line must be {{\"provenance\": {{...}}}}, got {lines[0][:80]!r}")
    return first["provenance"], [json.loads(line) for line in lines[1:]]
