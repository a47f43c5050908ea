"""The device to measure on: CUDA when there is one, with the dtype its fused kernels take.

Book: the chapters that measure, 7 ("The KV cache", chapters/08_the_kv_cache.ipynb), 8
("What it costs", chapters/11_what_it_costs.ipynb) and 9 ("Failure modes",
chapters/12_failure_modes.ipynb): a reader with a GPU (Colab, say) measures on it, and
every such cell says which device ran and whether the kernel it timed was the fused one
the text describes.

* ``pick(device=None)``: a :class:`DeviceChoice`: CUDA when present (else the CPU), the
  dtype to measure in (bfloat16 on sm80 and newer, float16 on older GPUs, whose fused
  SDPA kernels and Triton take no bfloat16, float32 on a CPU), and ``sentence``, what ran;
* ``flex_compiles(device, dtype)``: (bool, reason): whether compiled FlexAttention gets a
  fused kernel for this dtype here, or would fall back to its unfused eager reference;
* ``sdpa_fused(backend)``: whether the SDPA backend that ran (``detect_sdpa_backend``) is
  a fused kernel, with a sentence for a table cell.
"""
from __future__ import annotations

import dataclasses
import os

import torch

__all__ = ["DeviceChoice", "check_device", "pick", "flex_compiles", "sdpa_fused"]

_FUSED = {"flash": "fused (flash)", "efficient": "fused (memory-efficient)", "cudnn": "fused (cuDNN)"}


@dataclasses.dataclass(frozen=True)
class DeviceChoice:
    """Where and in which dtype a chapter measures (see :func:`pick`)."""

    device: torch.device
    dtype: torch.dtype
    name: str
    capability: tuple[int, int] | None  # CUDA compute capability, None on a CPU
    sentence: str  # what ran, for the reader

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def _cpu_name() -> str:
    from relpos_core.provenance import device_name

    return device_name("cpu")


def check_device(device) -> torch.device:
    """``device`` ("cpu", "cuda", "cuda:N" or a ``torch.device``) as a ``torch.device`` this
    machine has (a bare "cuda" gets the current index); anything else is a ValueError naming it."""
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from err
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {str(device)!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(device)!r} asks for CUDA, but torch.cuda.is_available() is False "
                             f"(torch {torch.__version__}): use the CPU or run on a GPU machine")
        index = torch.cuda.current_device() if device.index is None else device.index
        if not 0 <= index < torch.cuda.device_count():
            raise ValueError(f"device index must be in 0..{torch.cuda.device_count() - 1}, got {index}")
        device = torch.device("cuda", index)
    return device


def pick(device=None) -> DeviceChoice:
    """CUDA when available (else the CPU), or ``device`` ("cpu", "cuda", "cuda:1", a
    ``torch.device``); the dtype to measure in; and a sentence saying what ran."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = check_device(device)
    if device.type == "cuda":
        capability = tuple(torch.cuda.get_device_capability(device))
        name = torch.cuda.get_device_name(device)
        sm = f"sm{capability[0]}{capability[1]}"
        if capability >= (8, 0):
            dtype, why = torch.bfloat16, "bfloat16, which its fused kernels take"
        else:
            dtype, why = torch.float16, (f"float16: below sm80 the fused SDPA kernels and Triton (FlexAttention) "
                                         f"take no bfloat16, so bfloat16 would time the unfused fallbacks")
        sentence = f"Live measurements here run on {name} (CUDA, {sm}, torch {torch.__version__}) in {why}."
        return DeviceChoice(device, dtype, name, capability, sentence)
    name = _cpu_name()
    threads = torch.get_num_threads()
    if torch.version.cuda:
        why = f"torch {torch.__version__} is a CUDA build but sees no GPU"
    else:
        why = f"no GPU here (torch {torch.__version__}, a CPU build)"
    sentence = (f"Live measurements here run on the CPU ({name}, {threads} thread(s) of {os.cpu_count()} cores) "
                f"in float32: {why}; on a GPU runtime (Colab's, say) they run on CUDA.")
    return DeviceChoice(torch.device("cpu"), torch.float32, name, None, sentence)


def flex_compiles(device, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether ``torch.compile(flex_attention)`` gets a fused kernel for ``dtype`` on
    ``device``; (False, reason) where it would run FlexAttention's unfused eager reference."""
    device = torch.device(device)
    if device.type == "cpu":
        return True, "compiled to a fused C++ kernel by inductor"
    if device.type != "cuda":
        raise ValueError(f"device must be cpu or cuda, got {device}")
    if not torch.cuda.is_available():
        raise ValueError("device is cuda but torch.cuda.is_available() is False")
    capability = tuple(torch.cuda.get_device_capability(device))
    sm = f"sm{capability[0]}{capability[1]}"
    if capability < (7, 0):
        return False, f"Triton compiles for sm70 and newer, this GPU is {sm}"
    if dtype == torch.bfloat16:
        try:
            native = torch.cuda.is_bf16_supported(including_emulation=False)
        except TypeError:  # older torch: no including_emulation
            native = capability >= (8, 0)
        if not native:
            return False, (f"this GPU ({sm}) has no native bfloat16, so inductor skips compiling it and "
                           f"FlexAttention would run its unfused eager reference; use float16")
    return True, f"compiled to a fused Triton kernel ({sm})"


def sdpa_fused(backend: str) -> tuple[bool, str]:
    """(fused?, label) for the SDPA backend that ran, as ``detect_sdpa_backend`` names it."""
    if backend in _FUSED:
        return True, _FUSED[backend]
    if backend == "math":
        return False, "unfused (math fallback: the full score matrix)"
    return False, f"no single fused kernel ({backend})"
