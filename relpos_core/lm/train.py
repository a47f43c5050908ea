"""Train a byte-level language model per scheme, evaluate it at 1x-16x its training length, extend RoPE.

Book: "Evidence from a language model" (chapters/13_language_model.ipynb).

Models: the library's one transformer (``relpos_core.models.Transformer``, built as the
lab builds its models, ``relpos_core.lab.models``) with ``vocab_size = num_outputs = 256``
(one token per byte) and ``causal=True``; the schemes differ in nothing else. Training:
random windows of ``train_length + 1`` bytes of the training files (inputs and next-byte
targets), Adam (betas 0.9 / 0.95, no weight decay, ``foreach``), gradient norm clipped at
1, linear warm-up then cosine decay to ``min_lr_factor`` of the peak. Seeds from
``relpos_core.lab.train.derive_seed``: parameters by (seed, scheme), batches by seed alone,
so every scheme of a seed sees the same batches and is scored on the same text.

Past the training length a model is rebuilt at the evaluation length
(``model_at_length``): same scheme and options, ``max_positions`` = the length, the trained
parameters copied in. A table with a row per position or per offset (learned absolute,
Music Transformer's per-distance rows) keeps its trained rows and gets rows drawn at
initialisation for the positions training never reached (``extended_tables`` in each record
says which): those schemes are *evaluated with untrained rows* there, not undefined.
Randomised RoPE draws its training positions from ``[0, max(eval_lengths))`` and is
evaluated at positions drawn the same way (Ruoss et al.; as the synthetic lab does).

Evaluation (``evaluate``), in bits per byte (cross-entropy in bits; one token per byte):

* ``segments`` held-out segments of ``max(eval_lengths)`` bytes, evenly spaced through the
  held-out files (each starts at least that many bytes in, so a sliding window has context
  before it). At every length the *same* target bytes are scored, so lengths and schemes
  are compared on the same text.
* **non-overlapping**: each segment cut into windows of L bytes; every byte is scored once,
  with 0 .. L - 1 bytes of context.
* **sliding window** (Press et al. 2022): the first ``sliding_segments`` segments, scored in
  chunks of S = ``sliding_stride`` x L bytes; the chunk's window is the L bytes ending with
  it and only its last S predictions count, so every byte is scored exactly once, with at
  least L - S bytes of context (``sliding_windows``).
* **per position**: the non-overlapping windows' loss in ``bins`` equal bins of the position
  in the window: where the loss rises past the training length.
* **passkey** (``passkey_row``): a held-out window of L bytes of real code with a line
  ``passkey = "NNNNN"`` inserted at a depth, and ``passkey = "`` with the five digits at its
  end; the digits are scored teacher-forced (argmax accuracy per digit; all five right is
  the greedy answer), and their bits. Depths: at the start, in the middle, and "near" (the
  line ending ``NEAR`` bytes before the query: inside the training length at every L, the
  in-distribution baseline).

The extension stage (``extension_run``): a trained RoPE model with each method of
``presets.EXTENSIONS`` (position interpolation, NTK-aware, dynamic NTK, YaRN, Llama 3.1, a
raised base) at factor ``finetune_length / train_length``, evaluated zero-shot at every
length; then fine-tuned at ``finetune_length`` for ``finetune_steps`` steps with that method
(plain RoPE fine-tuned the same way is the control) and evaluated again.
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from relpos_core._validate import check_int, check_positive_int
from relpos_core.lab.models import build_model, lab_config
from relpos_core.lab.train import derive_seed, threads
from relpos_core.models import Transformer

from .corpus import Corpus
from .presets import Extension, LMPreset

__all__ = ["LN2", "NEEDLE", "QUERY", "NEAR", "DIGITS", "byte_tensor", "model_config", "model_at_length",
           "train_model", "segment_starts", "nonoverlapping_windows", "sliding_windows", "window_bits", "evaluate",
           "passkey_row", "passkey_probe", "base_run", "extension_run", "jobs_of", "run_jobs"]

LN2 = math.log(2.0)
NEEDLE = b'\npasskey = "'
QUERY = b'\npasskey = "'
DIGITS = 5
NEAR = 48  # bytes between the end of the "near" passkey line and the query
DEPTHS = ("start", "middle", "near")


def byte_tensor(data: bytes) -> torch.Tensor:
    """(N,) int64 tokens of ``data`` (one per byte)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def _position_options(preset: LMPreset, scheme: str, extra: dict | None = None) -> dict:
    """The scheme's options: randomised positions drawn from the longest evaluation range
    (any scheme whose options have a ``max_positions`` field), plus ``extra``."""
    from relpos_core import schemes
    from relpos_core.layers import is_pattern

    if is_pattern(scheme):  # a model whose layers differ: each layer spells its own options
        return dict(extra or {})
    options_cls = schemes.lookup(scheme).scheme.options
    names = {f.name for f in dataclasses.fields(options_cls)} if dataclasses.is_dataclass(options_cls) else set()
    out = {}
    if "max_positions" in names:
        out["max_positions"] = preset.max_length
    out.update(extra or {})
    return out


def model_config(preset: LMPreset, scheme: str, *, max_positions: int | None = None, position: dict | None = None):
    return lab_config(scheme, vocab_size=256, num_classes=256, causal=True,
                      max_positions=preset.train_length if max_positions is None else max_positions,
                      position=_position_options(preset, scheme, position), **preset.model)


@torch.no_grad()
def model_at_length(model: Transformer, length: int, *, seed: int, position: dict | None = None):
    """``model`` rebuilt for ``length`` tokens (and ``position`` options replacing its own), trained weights in.

    Returns (model, extended): ``extended`` names each table that had to grow, with its
    trained and new row counts; the new rows are drawn at initialisation (from ``seed``).
    A table of ``2 m - 1`` rows (one per offset, centred) keeps its trained rows in the
    centre; any other keeps them first.
    """
    cfg = model.config
    length = check_positive_int("length", length)
    options = dict(cfg.position, **(position or {}))
    if length <= cfg.max_positions and not position:
        return model, {}
    new_cfg = dataclasses.replace(cfg, max_positions=max(length, cfg.max_positions), position=options,
                                  head_dim=cfg.head_dim, num_outputs=cfg.num_outputs, d_mlp=cfg.d_mlp)
    new = build_model(new_cfg, seed=seed).eval()
    old_state = model.state_dict()
    new_state = new.state_dict()
    params = {name for name, _ in new.named_parameters()}
    extended = {}
    for name, tensor in new_state.items():
        old = old_state.get(name)
        if old is None:
            raise ValueError(f"{name} has no trained value in the model being extended")
        if old.shape == tensor.shape:
            tensor.copy_(old)
            continue
        if name not in params:  # a computed buffer (a sinusoid table): the new one is right
            continue
        if old.dim() != tensor.dim() or old.shape[1:] != tensor.shape[1:] or old.shape[0] > tensor.shape[0]:
            raise ValueError(f"cannot extend {name} from {tuple(old.shape)} to {tuple(tensor.shape)}")
        centred = old.shape[0] % 2 == 1 and tensor.shape[0] % 2 == 1 and old.shape[0] == 2 * cfg.max_positions - 1
        if centred:
            lo = (tensor.shape[0] - old.shape[0]) // 2
            tensor[lo:lo + old.shape[0]].copy_(old)
        else:
            tensor[:old.shape[0]].copy_(old)
        extended[name] = {"trained_rows": old.shape[0], "rows": tensor.shape[0],
                          "layout": "centred" if centred else "first"}
    return new, extended


def _lr(step: int, preset_steps: int, warmup: int, peak: float, floor: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, preset_steps - warmup)
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def _update(model: Transformer, optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One optimiser step on ``loss``: gradients, their norm clipped at 1 (``foreach``: the same numbers
    bit for bit as the per-parameter loop, in one call), the step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    optimizer.step()


def _optimizer(model, lr):
    return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.95), foreach=True)


def train_model(model: Transformer, data: torch.Tensor, *, steps: int, batch: int, length: int, lr: float,
                warmup: int, min_lr_factor: float, seed: int, log_every: int) -> dict:
    """Train ``model`` in place on random windows of ``data``; returns {curve, steps, tokens, train_s}."""
    g = torch.Generator().manual_seed(seed)
    opt = _optimizer(model, lr)
    offsets = torch.arange(length + 1)  # (L + 1,)
    curve, window, n = [], 0.0, 0
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = _lr(step, steps, warmup, lr, min_lr_factor)
        starts = torch.randint(0, data.numel() - length - 1, (batch,), generator=g)  # (B,)
        x = data[starts[:, None] + offsets]  # (B, L + 1)
        logits = model(x[:, :-1])  # (B, L, 256)
        loss = F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
        _update(model, opt, loss)
        window += loss.item()
        n += 1
        if (step + 1) % log_every == 0 or step + 1 == steps:
            curve.append([step + 1, round(window / n / LN2, 4)])  # bits per byte
            window, n = 0.0, 0
    model.eval()
    return {"curve": curve, "steps": steps, "tokens": steps * batch * length,
            "train_s": round(time.perf_counter() - start, 2)}


# -- evaluation ---------------------------------------------------------------------------
def segment_starts(total: int, count: int, length: int) -> list[int]:
    """``count`` evenly spaced starts of ``length``-byte target segments in a stream of ``total``
    bytes, each at least ``length`` bytes in (context for a sliding window) and not overlapping."""
    count = check_positive_int("count", count)
    length = check_positive_int("length", length)
    room = total - 2 * length - 1  # first start at `length`, last segment's targets inside the stream
    if room < (count - 1) * length:
        raise ValueError(f"the held-out text ({total} bytes) is too short for {count} segments of {length} bytes")
    if count == 1:
        return [length]
    return [length + (i * room) // (count - 1) for i in range(count)]


def nonoverlapping_windows(starts, segment: int, length: int) -> list[tuple[int, int, int]]:
    """(window start, first scored index in the window, segment number): segments cut into windows of
    ``length``; every index of the window is scored. A window at w predicts bytes w + 1 .. w + length."""
    if segment % length:
        raise ValueError(f"length must divide the segment length {segment}, got {length}")
    return [(s + k * length, 0, i) for i, s in enumerate(starts) for k in range(segment // length)]


def sliding_windows(starts, segment: int, length: int, stride: int) -> list[tuple[int, int, int]]:
    """(window start, first scored index, segment number) of a sliding-window evaluation:
    chunks of ``stride`` target bytes, each scored by the window of ``length`` bytes ending with it
    (its last ``stride`` predictions), so each target byte is scored exactly once with at least
    ``length - stride`` bytes before it in the window."""
    stride = check_int("stride", stride, min_value=1, max_value=length)
    if segment % stride:
        raise ValueError(f"stride must divide the segment length {segment}, got {stride}")
    out = []
    for i, s in enumerate(starts):
        for c in range(segment // stride):
            end = s + (c + 1) * stride  # the window's inputs are [end - length, end), targets one later
            if end - length < 0:
                raise ValueError(f"segment {i} starts at {s}: too early for windows of {length}")
            out.append((end - length, length - stride, i))
    return out


@torch.inference_mode()
def window_bits(model: Transformer, data: torch.Tensor, window_starts, length: int, *, positions_g=None,
                chunk_tokens: int = 16384) -> torch.Tensor:
    """Bits of every prediction of each window: (W, length) float64, row w predicting
    data[s + 1 .. s + length] from data[s .. s + length - 1]."""
    offsets = torch.arange(length + 1)  # (L + 1,)
    per = max(1, chunk_tokens // length)
    out = []
    for i in range(0, len(window_starts), per):
        starts = torch.tensor(window_starts[i:i + per])  # (b,)
        x = data[starts[:, None] + offsets]  # (b, L + 1)
        positions = model.position.training_positions(length, positions_g) if positions_g is not None else None
        logits = model(x[:, :-1], positions=positions).double()  # (b, L, 256)
        nats = F.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1), reduction="none")
        out.append(nats.reshape(-1, length) / LN2)
    return torch.cat(out)


def passkey_row(held_out: bytes, length: int, depth: str, generator: torch.Generator) -> dict:
    """One passkey row: L + 1 bytes of held-out code with the passkey line at ``depth`` and the
    query + digits at the end. Returns {tokens: (L + 1,) int64, digits: str, needle: start of the
    line, distance: bytes from the line's start to the query's start, scored: indices of the
    predictions of the digits (inputs L - 5 .. L - 1)}."""
    digits = "".join(str(int(d)) for d in torch.randint(0, 10, (DIGITS,), generator=generator))
    needle = NEEDLE + digits.encode() + b'"\n'
    tail = QUERY + digits.encode()
    filler_len = length + 1 - len(needle) - len(tail)
    if filler_len < NEAR + 8:
        raise ValueError(f"length must be at least {len(needle) + len(tail) + NEAR + 7} for a passkey row, got {length}")
    offset = int(torch.randint(0, len(held_out) - filler_len, (1,), generator=generator))
    filler = held_out[offset:offset + filler_len]
    if depth == "start":
        p = 0
    elif depth == "middle":
        p = filler_len // 2
    elif depth == "near":
        p = filler_len - NEAR
    else:
        raise ValueError(f"depth must be one of {DEPTHS}, got {depth!r}")
    text = filler[:p] + needle + filler[p:] + tail
    assert len(text) == length + 1
    tokens = byte_tensor(text)
    query_start = length + 1 - len(tail)
    first = length - DIGITS  # the input position whose prediction is the first digit
    return {"tokens": tokens, "digits": digits, "needle": p, "distance": query_start - p,
            "scored": list(range(first, length))}


@torch.inference_mode()
def passkey_probe(model, held_out: bytes, length: int, rows: int, *, seed: int, positions_g=None) -> dict:
    """Passkey rows at ``length``, depths cycled: per depth {rows, digit_correct, digits, exact, bits, distance}."""
    g = torch.Generator().manual_seed(seed)
    out = {d: {"rows": 0, "digit_correct": 0, "digits": 0, "exact": 0, "bits": 0.0, "distances": []} for d in DEPTHS}
    built = [passkey_row(held_out, length, DEPTHS[r % len(DEPTHS)], g) | {"depth": DEPTHS[r % len(DEPTHS)]}
             for r in range(rows)]
    per = max(1, 16384 // length)
    for i in range(0, rows, per):
        part = built[i:i + per]
        x = torch.stack([b["tokens"] for b in part])  # (b, L + 1)
        positions = model.position.training_positions(length, positions_g) if positions_g is not None else None
        logits = model(x[:, :-1], positions=positions).double()  # (b, L, 256)
        for row, lg, xx in zip(part, logits, x):
            idx = torch.tensor(row["scored"])
            target = xx[idx + 1]  # (5,)
            logp = torch.log_softmax(lg[idx], -1)  # (5, 256)
            right = logp.argmax(-1) == target
            entry = out[row["depth"]]
            entry["rows"] += 1
            entry["digit_correct"] += int(right.sum())
            entry["digits"] += DIGITS
            entry["exact"] += int(right.all())
            entry["bits"] += float(-logp.gather(1, target[:, None]).sum() / LN2)
            entry["distances"].append(row["distance"])
    for entry in out.values():
        d = entry.pop("distances")
        entry["distance_min"], entry["distance_max"] = (min(d), max(d)) if d else (None, None)
        entry["bits"] = round(entry["bits"], 4)
    return out


def evaluate(model, preset: LMPreset, held: torch.Tensor, held_bytes: bytes, *, seed: int, init_seed: int,
             position: dict | None = None) -> tuple[dict, dict]:
    """Every length of ``preset.eval_lengths``: non-overlapping, sliding, per-position bins, passkey.

    Returns (evaluation by length, tables extended by length)."""
    seg = preset.max_length
    starts = segment_starts(held.numel(), preset.segments, seg)
    out, extended = {}, {}
    draws = model.position.training_positions(1, torch.Generator()) is not None  # randomised: drawn at test time too
    for L in preset.eval_lengths:
        m, ext = model_at_length(model, L, seed=init_seed, position=position)
        if ext:
            extended[str(L)] = ext
        pg = torch.Generator().manual_seed(derive_seed(seed, "positions", L)) if draws else None
        bits = window_bits(m, held, [w for w, _, _ in nonoverlapping_windows(starts, seg, L)], L, positions_g=pg)
        per_segment = bits.reshape(preset.segments, -1).mean(1)  # (segments,)
        bins = bits.reshape(-1, preset.bins, L // preset.bins).mean((0, 2))  # (bins,)
        stride = max(1, int(L * preset.sliding_stride))
        sw = sliding_windows(starts[:preset.sliding_segments], seg, L, stride)
        sbits = window_bits(m, held, [w for w, _, _ in sw], L, positions_g=pg)[:, L - stride:]  # (W, S)
        s_segment = sbits.reshape(preset.sliding_segments, -1).mean(1)
        row = {"bpb": round(float(bits.mean()), 5), "bpb_segments": [round(float(v), 5) for v in per_segment],
               "sliding_bpb": round(float(sbits.mean()), 5),
               "sliding_segments": [round(float(v), 5) for v in s_segment], "sliding_stride": stride,
               "bins": [round(float(v), 5) for v in bins], "tokens": int(bits.numel()),
               "sliding_tokens": int(sbits.numel())}
        if L >= len(NEEDLE) + DIGITS + 2 + len(QUERY) + DIGITS + NEAR + 7:
            row["passkey"] = passkey_probe(m, held_bytes, L, preset.probe_rows, seed=derive_seed(seed, "passkey", L),
                                           positions_g=pg)
        else:
            row["passkey"] = None  # too short for the line, the query and the near depth
        out[str(L)] = row
    return out, extended


# -- runs ---------------------------------------------------------------------------------
def _data(corpus: Corpus):
    return byte_tensor(corpus.train), byte_tensor(corpus.held_out)


def base_run(preset: LMPreset, scheme: str, seed: int, corpus: Corpus, *, models_dir=None) -> dict:
    """Train ``scheme`` with ``seed`` at ``preset.train_length``; evaluate at every length."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    train, held = _data(corpus)
    init_seed = derive_seed(seed, "init", scheme)
    model = build_model(model_config(preset, scheme), seed=init_seed)
    trained = train_model(model, train, steps=preset.steps, batch=preset.batch_size, length=preset.train_length,
                          lr=preset.lr, warmup=preset.warmup_steps, min_lr_factor=preset.min_lr_factor,
                          seed=derive_seed(seed, "train"), log_every=preset.log_every)
    if models_dir is not None and scheme == preset.extension_scheme:
        Path(models_dir).mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), Path(models_dir) / f"{scheme}-seed{seed}.pt")
    t1 = time.perf_counter()
    evaluation, extended = evaluate(model, preset, held, corpus.held_out, seed=seed, init_seed=init_seed)
    return {"kind": "base", "run_id": f"base/{scheme}", "scheme": scheme, "seed": seed,
            "model": model.config.record(),
            "parameters": sum(p.numel() for p in model.parameters()), **trained, "eval": evaluation,
            "extended_tables": extended, "eval_s": round(time.perf_counter() - t1, 2),
            "wall_s": round(time.perf_counter() - t0, 2), "cpu_s": round(time.process_time() - cpu0, 2)}


def _extension_base(preset, seed, corpus, models_dir):
    """The trained model of ``seed`` the extension stage starts from (``preset.extension_scheme``, declared
    ``Lab(extended=True)``): loaded from ``models_dir`` if stage 1 saved it, else trained again
    (the same seed gives the same model on the same machine)."""
    scheme = preset.extension_scheme
    init_seed = derive_seed(seed, "init", scheme)
    model = build_model(model_config(preset, scheme), seed=init_seed)
    path = Path(models_dir) / f"{scheme}-seed{seed}.pt" if models_dir is not None else None
    if path is not None and path.is_file():
        model.load_state_dict(torch.load(path, weights_only=True))
        model.eval()
        return model, init_seed, "loaded"
    train, _ = _data(corpus)
    train_model(model, train, steps=preset.steps, batch=preset.batch_size, length=preset.train_length,
                lr=preset.lr, warmup=preset.warmup_steps, min_lr_factor=preset.min_lr_factor,
                seed=derive_seed(seed, "train"), log_every=preset.log_every)
    return model, init_seed, "retrained"


def extension_run(preset: LMPreset, method: Extension, seed: int, corpus: Corpus, *, models_dir=None) -> dict:
    """One method on the trained RoPE model of ``seed``: zero-shot, then (``seed`` in ``finetune_seeds``)
    fine-tuned at ``finetune_length``."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    train, held = _data(corpus)
    base, init_seed, source = _extension_base(preset, seed, corpus, models_dir)
    position = method.position(preset.factor, preset.train_length)
    record = {"kind": "extension", "run_id": f"extension/{method.name}", "method": method.name,
              "display": method.display, "scheme": preset.extension_scheme, "seed": seed, "position": position,
              "factor": preset.factor, "base_model": source}
    if position:
        record["zero_shot"], _ = evaluate(base, preset, held, corpus.held_out, seed=seed, init_seed=init_seed,
                                          position=position)
    else:
        record["zero_shot"] = None  # plain RoPE zero-shot is the base run (stage 1)
    if seed not in preset.finetune_seeds:
        record.update(finetune=None, finetuned=None, wall_s=round(time.perf_counter() - t0, 2),
                      cpu_s=round(time.process_time() - cpu0, 2))
        return record
    model, _ = model_at_length(base, preset.finetune_length, seed=init_seed, position=position or None)
    if model is base:
        model = build_model(model_config(preset, preset.extension_scheme), seed=init_seed)
        model.load_state_dict(base.state_dict())
    ft = train_model(model, train, steps=preset.finetune_steps, batch=preset.finetune_batch,
                     length=preset.finetune_length, lr=preset.finetune_lr, warmup=preset.finetune_warmup,
                     min_lr_factor=preset.min_lr_factor, seed=derive_seed(seed, "finetune", method.name),
                     log_every=max(1, preset.log_every // 2))
    record["finetune"] = {k: ft[k] for k in ("curve", "steps", "tokens", "train_s")} | {
        "length": preset.finetune_length, "batch": preset.finetune_batch, "lr": preset.finetune_lr}
    record["finetuned"], _ = evaluate(model, preset, held, corpus.held_out, seed=seed, init_seed=init_seed)
    record.update(wall_s=round(time.perf_counter() - t0, 2), cpu_s=round(time.process_time() - cpu0, 2))
    return record


def jobs_of(preset: LMPreset, seeds=None, schemes=None) -> list[tuple]:
    """Every job in order: ("base", scheme, seed) seed by seed (the extension scheme first in each seed,
    so its models are saved early), then ("extension", method, seed) for every extension seed."""
    seeds = tuple(preset.seeds if seeds is None else seeds)
    schemes = tuple(preset.schemes if schemes is None else schemes)
    jobs = []
    for seed in seeds:
        ordered = sorted(schemes, key=lambda s: s != preset.extension_scheme)
        jobs += [("base", s, seed) for s in ordered]
    if preset.extension_scheme in schemes:
        for seed in preset.extension_seeds:  # plain RoPE only where it is fine-tuned (its zero-shot is the base run)
            jobs += [("extension", e.name, seed) for e in preset.extensions
                     if e.position(preset.factor, preset.train_length) or seed in preset.finetune_seeds]
    return jobs


def job_id(job) -> str:
    return f"{job[0]}/{job[1]}/seed{job[2]}"


def record_id(record: dict) -> str:
    name = record["scheme"] if record["kind"] == "base" else record["method"]
    return f"{record['kind']}/{name}/seed{record['seed']}"


_CORPUS = {}


def _worker_init(n_threads, corpus_kwargs):
    torch.set_num_threads(n_threads)
    from .corpus import load_corpus
    _CORPUS["corpus"] = load_corpus(**corpus_kwargs)


def run_job(preset: LMPreset, job, corpus: Corpus | None = None, models_dir=None) -> dict:
    corpus = corpus if corpus is not None else _CORPUS["corpus"]
    kind, name, seed = job
    if kind == "base":
        return base_run(preset, name, seed, corpus, models_dir=models_dir)
    method = {e.name: e for e in preset.extensions}[name]
    return extension_run(preset, method, seed, corpus, models_dir=models_dir)


def run_jobs(preset: LMPreset, jobs, corpus: Corpus, *, workers: int = 1, threads_per_run: int = 1,
             models_dir=None, on_record=None, corpus_kwargs=None) -> list[dict]:
    """Run ``jobs`` (``jobs_of``), ``workers`` at a time, each in its own process of
    ``threads_per_run`` threads; ``on_record(record)`` as each finishes. Ctrl-C or a failure
    stops every worker (finished records were already handed to ``on_record``)."""
    workers = check_positive_int("workers", workers)
    out = []
    if workers == 1:
        with threads(threads_per_run):
            for job in jobs:
                record = run_job(preset, job, corpus, models_dir)
                out.append(record)
                if on_record is not None:
                    on_record(record)
        return out
    import concurrent.futures
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_init,
                                                  initargs=(threads_per_run, corpus_kwargs or {}))
    try:
        futures = [pool.submit(run_job, preset, job, None, models_dir) for job in jobs]
        for future in concurrent.futures.as_completed(futures):
            record = future.result()
            out.append(record)
            if on_record is not None:
                on_record(record)
        return out
    except BaseException:
        running = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in running:
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True)
