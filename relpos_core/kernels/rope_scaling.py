"""RoPE past its training length: the context-extension scalings, as ``Rotary.scaling`` objects.

Book: "RoPE past its training length" (chapters/07_rope_context_extension.ipynb);
the KV cache of a scaled model in "The KV cache at the scale of real models".

A RoPE model trained on sequences of ``L`` tokens has only ever seen angles
``n theta_k`` with ``n < L``. Pair k turns at ``theta_k = base^(-2k / r)`` (r: the rotated
dimensions), so its wavelength is ``lambda_k = 2 pi / theta_k``. The methods here change
the frequencies (and some the size of the logits) so that a longer context reuses
angles the model knows:

* ``LinearScaling`` -- position interpolation (Chen, Wong, Chen and Tian 2023,
  arXiv:2306.15595): every frequency divided by the factor s, i.e. positions squeezed
  into the trained range. Hugging Face's ``"linear"``.
* ``NTKScaling`` -- "NTK-aware" scaling (bloc97, 2023): the base raised to
  ``base * s^(r / (r - 2))``, so the lowest frequency is divided by s and the highest is
  left almost alone. Hugging Face has it only in its dynamic form (below); the static
  form equals that function with factor 1 at ``seq_len = s L``.
* ``DynamicNTKScaling`` -- the same, with the factor following the sequence
  (emozilla, 2023): at ``seq_len`` > L the base is ``base (s seq_len / L - (s - 1))^(r / (r - 2))``,
  unchanged up to L. Hugging Face's ``"dynamic"``. Its frequencies change as the
  sequence grows, so a key rotated once would go stale: ``dynamic`` is True and a KV
  cache must keep keys unrotated.
* ``YaRNScaling`` -- YaRN (Peng, Quesnelle, Fan and Shippole 2024, arXiv:2309.00071):
  "NTK-by-parts": pairs whose wavelength is short compared with L (more than
  ``beta_fast`` turns inside L) are left alone, pairs with fewer than ``beta_slow`` turns
  are interpolated by s, a linear ramp in between; and an attention temperature,
  ``sqrt(1/t) = 0.1 ln s + 1`` multiplying q and k (the logits by its square).
  Hugging Face's ``"yarn"`` (with DeepSeek's ``mscale`` / ``mscale_all_dim``).
* ``Llama3Scaling`` -- Llama 3.1's frequency-dependent scaling (Grattafiori et al. 2024,
  "The Llama 3 Herd of Models"; Meta's reference code): wavelengths shorter than
  ``L / high_freq_factor`` kept, longer than ``L / low_freq_factor`` divided by s, a
  smooth blend between. Hugging Face's ``"llama3"``.
* ``LongRoPEScaling`` -- LongRoPE (Ding et al. 2024, arXiv:2402.13753), as Phi-3 ships
  it: one searched rescale factor per pair, a ``short_factor`` list up to L and a
  ``long_factor`` list beyond, and an attention factor
  ``sqrt(1 + ln s / ln L)``. The switch at L depends on the sequence length, so it is
  ``dynamic`` too. Hugging Face's ``"longrope"``.

Each object provides what ``relpos_core.kernels.rotary`` asks of a scaling:
``inverse_frequencies(rotary_dim, base, *, seq_len=None, device=None)`` -> (r/2,) float64,
``attention_factor`` (multiplies cos and sin of q and k, so every logit by its square,
as Hugging Face does) and ``dynamic``. ``from_config`` builds one from a dict shaped like
Hugging Face's ``rope_scaling`` (``{"rope_type": "yarn", "factor": 4, ...}``), checking
every field. The sign convention is RoPE's (``key_minus_query``): scaling changes the
frequencies, never the sign of an offset.

``seq_len`` (dynamic methods only) is the call's largest position + 1. Hugging Face's
dynamic NTK keeps the frequencies of the longest sequence it has seen (until a call
shorter than L resets them); here the frequencies are a function of the call alone, so a
one-layer decoder with a cache equals the recomputation of each prefix, and a deeper one
the recomputation of each token at its own step (``tests/test_rope_scaling.py``).
"""
from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import ClassVar

import torch

__all__ = ["ROPE_TYPES", "LinearScaling", "NTKScaling", "DynamicNTKScaling", "YaRNScaling", "Llama3Scaling",
           "LongRoPEScaling", "from_config", "default_inverse_frequencies", "wavelengths", "stretch", "yarn_mscale",
           "is_scaling"]


def default_inverse_frequencies(rotary_dim: int, base: float, *, device=None) -> torch.Tensor:
    """RoPE's own theta_k = base^(-2k / r), k = 0 .. r/2 - 1: (r/2,) float64."""
    r = _check_rotary_dim(rotary_dim)
    exponent = torch.arange(0, r, 2, dtype=torch.float64, device=device) / r  # (r/2,)
    return 1.0 / (float(base) ** exponent)


def wavelengths(rotary_dim: int, base: float, scaling=None, *, seq_len: int | None = None) -> torch.Tensor:
    """2 pi / theta_k of each pair, in tokens: (r/2,) float64 (``scaling`` None: plain RoPE)."""
    inv = default_inverse_frequencies(rotary_dim, base) if scaling is None else \
        scaling.inverse_frequencies(rotary_dim, base, seq_len=seq_len)
    return 2 * math.pi / inv.to(torch.float64)


def stretch(scaling, rotary_dim: int, base: float, *, seq_len: int | None = None) -> torch.Tensor:
    """theta_k / theta'_k per pair: 1 where a method leaves the pair alone, s where it interpolates by s."""
    plain = default_inverse_frequencies(rotary_dim, base)
    return plain / scaling.inverse_frequencies(rotary_dim, base, seq_len=seq_len).to(torch.float64)


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's sqrt(1/t) = 0.1 mscale ln s + 1 for s > 1, else 1 (Peng et al. 2024, eq. 22)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


# -- checks --------------------------------------------------------------------------------
MAX_VALUE = 1e6  # no field of a scaling is meaningful beyond it (a factor of 1e6 stretches 4k to 4G positions)
MAX_TRAINING_LENGTH = 2**40  # original_max_position_embeddings: positions are bounded there too


def _real(kind: str, name: str, value, *, low: float, inclusive: bool = True, high: float = MAX_VALUE) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok:
        try:
            ok = math.isfinite(float(value))
        except OverflowError:  # an int past float's range (2**1100)
            ok = False
    if ok:
        v = float(value)
        ok = (v >= low if inclusive else v > low) and v <= high
    if not ok:
        bound = f"{'>=' if inclusive else '>'} {low:g}" + ("" if high == math.inf else f" and <= {high:g}")
        raise ValueError(f"rope scaling {kind!r}: {name} must be a finite real number {bound}, got {value!r}")
    return float(value)


def _length(kind: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 2 <= int(value) <= MAX_TRAINING_LENGTH:
        raise ValueError(f"rope scaling {kind!r}: original_max_position_embeddings (the training length) must be an "
                         f"integer >= 2 and <= 2**40, got {value!r}")
    return int(value)


def _check_rotary_dim(rotary_dim) -> int:
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, numbers.Integral) or rotary_dim < 2 \
            or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be an even integer >= 2, got {rotary_dim!r}")
    return int(rotary_dim)


def _check_base(base) -> float:
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not float(base) > 1:
        raise ValueError(f"base must be a real number > 1, got {base!r}")
    return float(base)


def _check_seq_len(seq_len):
    if seq_len is None:
        return None
    if isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral) or seq_len < 1:
        raise ValueError(f"seq_len must be None or an integer >= 1 (the call's largest position + 1), got {seq_len!r}")
    return int(seq_len)


def _ntk_base(kind: str, base: float, r: int, alpha: float) -> float:
    if r < 4:
        raise ValueError(f"rope scaling {kind!r} needs rotary_dim >= 4 (the base is raised to the power r / (r - 2)), "
                         f"got {r}")
    return base * alpha ** (r / (r - 2))


class _Scaling:
    """What every scaling shares: its ``rope_type``, ``to_dict`` and the argument checks of a call."""

    rope_type: ClassVar[str] = ""
    dynamic: ClassVar[bool] = False

    @property
    def attention_factor(self) -> float:
        return 1.0

    def to_dict(self) -> dict:
        """The Hugging Face ``rope_scaling`` dict of this scaling (``from_config`` reads it back)."""
        out = {"rope_type": self.rope_type}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def _call(self, rotary_dim, base, seq_len):
        return _check_rotary_dim(rotary_dim), _check_base(base), _check_seq_len(seq_len)


@dataclass(frozen=True)
class LinearScaling(_Scaling):
    """Position interpolation (Chen et al. 2023): theta'_k = theta_k / factor for every pair."""

    factor: float
    rope_type: ClassVar[str] = "linear"

    def __post_init__(self):
        object.__setattr__(self, "factor", _real("linear", "factor", self.factor, low=1.0))

    def inverse_frequencies(self, rotary_dim, base, *, seq_len=None, device=None) -> torch.Tensor:
        r, base, _ = self._call(rotary_dim, base, seq_len)
        return default_inverse_frequencies(r, base, device=device) / self.factor  # (r/2,)


@dataclass(frozen=True)
class NTKScaling(_Scaling):
    """NTK-aware scaling (bloc97 2023): base' = base * factor^(r / (r - 2)), fixed."""

    factor: float
    rope_type: ClassVar[str] = "ntk"

    def __post_init__(self):
        object.__setattr__(self, "factor", _real("ntk", "factor", self.factor, low=1.0))

    def inverse_frequencies(self, rotary_dim, base, *, seq_len=None, device=None) -> torch.Tensor:
        r, base, _ = self._call(rotary_dim, base, seq_len)
        return default_inverse_frequencies(r, _ntk_base("ntk", base, r, self.factor), device=device)


@dataclass(frozen=True)
class DynamicNTKScaling(_Scaling):
    """Dynamic NTK (emozilla 2023): NTK-aware scaling whose factor follows the sequence length.

    At ``seq_len`` <= L (``original_max_position_embeddings``): plain RoPE. Beyond:
    base' = base (factor seq_len / L - (factor - 1))^(r / (r - 2)).
    """

    factor: float
    original_max_position_embeddings: int
    rope_type: ClassVar[str] = "dynamic"
    dynamic: ClassVar[bool] = True

    def __post_init__(self):
        object.__setattr__(self, "factor", _real("dynamic", "factor", self.factor, low=1.0))
        object.__setattr__(self, "original_max_position_embeddings",
                           _length("dynamic", self.original_max_position_embeddings))

    def inverse_frequencies(self, rotary_dim, base, *, seq_len=None, device=None) -> torch.Tensor:
        r, base, seq_len = self._call(rotary_dim, base, seq_len)
        L = self.original_max_position_embeddings
        n = L if seq_len is None else max(seq_len, L)
        alpha = self.factor * n / L - (self.factor - 1)
        return default_inverse_frequencies(r, _ntk_base("dynamic", base, r, alpha), device=device)


@dataclass(frozen=True)
class YaRNScaling(_Scaling):
    """YaRN (Peng et al. 2024): NTK-by-parts frequencies and an attention temperature.

    ``beta_fast`` / ``beta_slow``: pairs turning more than ``beta_fast`` times inside L are
    left alone, fewer than ``beta_slow`` times are interpolated by ``factor``, a linear ramp
    between (its ends rounded outwards when ``truncate``). ``attention_factor`` (None: from
    the factor, 0.1 ln s + 1, or DeepSeek's ratio of ``mscale`` to ``mscale_all_dim``)
    multiplies q and k.
    """

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    rope_type: ClassVar[str] = "yarn"

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "factor", _real("yarn", "factor", self.factor, low=1.0))
        set_(self, "original_max_position_embeddings", _length("yarn", self.original_max_position_embeddings))
        set_(self, "beta_fast", _real("yarn", "beta_fast", self.beta_fast, low=0.0, inclusive=False))
        set_(self, "beta_slow", _real("yarn", "beta_slow", self.beta_slow, low=0.0, inclusive=False))
        if not self.beta_fast > self.beta_slow:
            raise ValueError(f"rope scaling 'yarn': beta_fast must be greater than beta_slow (the ramp runs from "
                             f"beta_fast turns down to beta_slow), got beta_fast={self.beta_fast}, "
                             f"beta_slow={self.beta_slow}")
        for name in ("mscale", "mscale_all_dim"):
            if getattr(self, name) is not None:
                set_(self, name, _real("yarn", name, getattr(self, name), low=0.0, inclusive=False))
        if not isinstance(self.truncate, bool):
            raise ValueError(f"rope scaling 'yarn': truncate must be True or False, got {self.truncate!r}")
        if self.attention_factor is not None:
            value = _real("yarn", "attention_factor", self.attention_factor, low=0.0, inclusive=False)
        elif self.mscale and self.mscale_all_dim:
            value = yarn_mscale(self.factor, self.mscale) / yarn_mscale(self.factor, self.mscale_all_dim)
        else:
            value = yarn_mscale(self.factor)
        set_(self, "attention_factor", float(value))

    def correction_range(self, rotary_dim: int, base: float) -> tuple[float, float]:
        """(low, high): the ramp's ends as pair indices, as Hugging Face computes them."""
        r, base = _check_rotary_dim(rotary_dim), _check_base(base)
        L = self.original_max_position_embeddings

        def pair_index(turns):  # the k whose wavelength fits ``turns`` times into L
            return r * math.log(L / (turns * 2 * math.pi)) / (2 * math.log(base))

        low, high = pair_index(self.beta_fast), pair_index(self.beta_slow)
        if self.truncate:
            low, high = math.floor(low), math.ceil(high)
        return max(low, 0), min(high, r - 1)

    def ramp(self, rotary_dim: int, base: float, *, device=None) -> torch.Tensor:
        """(r/2,) in [0, 1]: 0 where a pair is left alone (extrapolated), 1 where it is interpolated."""
        low, high = self.correction_range(rotary_dim, base)
        if low == high:
            high += 0.001  # as Hugging Face: no division by zero
        k = torch.arange(rotary_dim // 2, dtype=torch.float64, device=device)  # (r/2,)
        return ((k - low) / (high - low)).clamp(0, 1)

    def inverse_frequencies(self, rotary_dim, base, *, seq_len=None, device=None) -> torch.Tensor:
        r, base, _ = self._call(rotary_dim, base, seq_len)
        plain = default_inverse_frequencies(r, base, device=device)  # (r/2,)
        ramp = self.ramp(r, base, device=device)
        return plain / self.factor * ramp + plain * (1 - ramp)


@dataclass(frozen=True)
class Llama3Scaling(_Scaling):
    """Llama 3.1's scaling: wavelengths < L / high_freq_factor kept, > L / low_freq_factor divided
    by ``factor``, a smooth blend between (Meta's ``apply_scaling``)."""

    factor: float
    original_max_position_embeddings: int
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    rope_type: ClassVar[str] = "llama3"

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "factor", _real("llama3", "factor", self.factor, low=1.0))
        set_(self, "original_max_position_embeddings", _length("llama3", self.original_max_position_embeddings))
        set_(self, "low_freq_factor", _real("llama3", "low_freq_factor", self.low_freq_factor, low=0.0,
                                            inclusive=False))
        set_(self, "high_freq_factor", _real("llama3", "high_freq_factor", self.high_freq_factor, low=0.0,
                                             inclusive=False))
        if not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(f"rope scaling 'llama3': high_freq_factor must be greater than low_freq_factor, got "
                             f"high_freq_factor={self.high_freq_factor}, low_freq_factor={self.low_freq_factor}")

    def inverse_frequencies(self, rotary_dim, base, *, seq_len=None, device=None) -> torch.Tensor:
        r, base, _ = self._call(rotary_dim, base, seq_len)
        plain = default_inverse_frequencies(r, base, device=device)  # (r/2,)
        L, s = self.original_max_position_embeddings, self.factor
        wavelen = 2 * math.pi / plain
        low_wavelen, high_wavelen = L / self.low_freq_factor, L / self.high_freq_factor
        smooth = (L / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
        blended = (1 - smooth) * plain / s + smooth * plain
        out = torch.where(wavelen > low_wavelen, plain / s, plain)
        middle = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return torch.where(middle, blended, out)


@dataclass(frozen=True)
class LongRoPEScaling(_Scaling):
    """LongRoPE (Ding et al. 2024) as Phi-3 ships it: theta'_k = theta_k / lambda_k, with the
    searched ``short_factor`` lambdas up to L and ``long_factor`` beyond; ``attention_factor``
    (None: sqrt(1 + ln factor / ln L), 1 for factor <= 1) multiplies q and k."""

    short_factor: tuple
    long_factor: tuple
    original_max_position_embeddings: int
    factor: float | None = None
    attention_factor: float | None = None
    rope_type: ClassVar[str] = "longrope"
    dynamic: ClassVar[bool] = True

    def __post_init__(self):
        set_ = object.__setattr__
        for name in ("short_factor", "long_factor"):
            value = getattr(self, name)
            if not isinstance(value, (list, tuple)):
                raise ValueError(f"rope scaling 'longrope': {name} must be a list or tuple of positive numbers "
                                 f"(one per rotated pair), got a {type(value).__name__}")
            if len(value) == 0:
                raise ValueError(f"rope scaling 'longrope': {name} must be a non-empty list of positive numbers "
                                 f"(one per rotated pair), got {value!r}")
            set_(self, name, tuple(_real("longrope", f"{name}[{i}]", v, low=0.0, inclusive=False)
                                   for i, v in enumerate(value)))
        if len(self.short_factor) != len(self.long_factor):
            raise ValueError(f"rope scaling 'longrope': long_factor must have one entry per rotated pair, as "
                             f"short_factor has ({len(self.short_factor)}), got {len(self.long_factor)}")
        set_(self, "original_max_position_embeddings", _length("longrope", self.original_max_position_embeddings))
        if self.factor is not None:
            set_(self, "factor", _real("longrope", "factor", self.factor, low=1.0))
        if self.attention_factor is not None:
            value = _real("longrope", "attention_factor", self.attention_factor, low=0.0, inclusive=False)
        elif self.factor is not None:
            L = self.original_max_position_embeddings
            value = 1.0 if self.factor <= 1 else math.sqrt(1 + math.log(self.factor) / math.log(L))
        else:
            raise ValueError("rope scaling 'longrope': give factor (the extension ratio, from which the attention "
                             "factor follows) or attention_factor")
        set_(self, "attention_factor", float(value))

    def inverse_frequencies(self, rotary_dim, base, *, seq_len=None, device=None) -> torch.Tensor:
        r, base, seq_len = self._call(rotary_dim, base, seq_len)
        long = seq_len is not None and seq_len > self.original_max_position_embeddings
        lambdas = self.long_factor if long else self.short_factor
        if len(lambdas) != r // 2:
            name = "long_factor" if long else "short_factor"
            raise ValueError(f"rope scaling 'longrope': {name} must have one entry per rotated pair, rotary_dim / 2 = "
                             f"{r // 2}, got {len(lambdas)}")
        ext = torch.tensor(lambdas, dtype=torch.float64, device=device)  # (r/2,)
        return default_inverse_frequencies(r, base, device=device) / ext


_TYPES = {cls.rope_type: cls for cls in (LinearScaling, NTKScaling, DynamicNTKScaling, YaRNScaling, Llama3Scaling,
                                         LongRoPEScaling)}
ROPE_TYPES: tuple[str, ...] = tuple(_TYPES)
_NOT_SCALING_FIELDS = {"rope_theta": "RoPE's base option (base=...)",
                       "partial_rotary_factor": "RoPE's rotary_dim option (rotary_dim=...)"}


def is_scaling(obj) -> bool:
    """Whether ``obj`` provides what a ``Rotary.scaling`` must: ``inverse_frequencies``, ``attention_factor``, ``dynamic``."""
    return (callable(getattr(obj, "inverse_frequencies", None)) and hasattr(obj, "attention_factor")
            and hasattr(obj, "dynamic"))


def from_config(spec):
    """A scaling object from ``spec``: None, a scaling object (returned as is), or a dict like
    Hugging Face's ``rope_scaling`` (``rope_type`` or ``type``, then the method's fields).

    ``{"rope_type": "default"}`` means no scaling (None). An unknown type or field, a missing
    field, or a value out of range is a ValueError naming it.
    """
    if spec is None:
        return None
    if isinstance(spec, _Scaling) or (not isinstance(spec, dict) and is_scaling(spec)):
        return spec
    if not isinstance(spec, dict):
        raise ValueError(f"scaling must be None, a dict like Hugging Face's rope_scaling or a scaling object of "
                         f"relpos_core.kernels.rope_scaling, got {type(spec).__name__}")
    fields = dict(spec)
    kind = fields.pop("rope_type", None)
    legacy = fields.pop("type", None)
    if kind is not None and legacy is not None and kind != legacy:
        raise ValueError(f"scaling's rope_type {kind!r} and type {legacy!r} disagree: give one of them "
                         f"(type is Hugging Face's older name for rope_type)")
    kind = kind if kind is not None else legacy
    if kind == "default" and not fields:
        return None
    if kind not in _TYPES:
        raise ValueError(f"scaling's rope_type must be one of {list(ROPE_TYPES)} (or 'default' for none), "
                         f"got {kind!r}")
    cls = _TYPES[kind]
    known = [f.name for f in dataclasses.fields(cls)]
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    for name, where in _NOT_SCALING_FIELDS.items():
        if name in fields:
            raise ValueError(f"scaling field {name!r} is not a field of rope scaling {kind!r}: it is {where}")
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise ValueError(f"rope scaling {kind!r} has no field(s) {unknown}: its fields are {known}")
    missing = [n for n in required if fields.get(n) is None]
    if missing:
        raise ValueError(f"rope scaling {kind!r} needs the field(s) {missing}")
    return cls(**fields)
