"""``python -m relpos_core.bench``: which kernel path, and how does its cost grow with L, in one run.

Book: "What it costs" (chapters/11_what_it_costs.ipynb). Presets:
``relpos_core.bench.presets``; what is measured: ``relpos_core.bench.run``. Every
argument and the output path are checked before anything runs (``relpos_core.outputs``:
the default output is ``./relpos-results/bench-<device>-<time>.json``, nothing inside the
package or ``data/`` unless named, nothing replaced without ``--force``); every prepared
row is kept in ``<out>.partial.jsonl`` as it finishes, the result and its HTML figure
page are written at the end, and Ctrl-C writes what was measured, marked
``"complete": false`` (exit status 130). A row that failed makes the exit status 1.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys

from relpos_core.bench.presets import MAX_LENGTH, PRESETS, SCHEMA
from relpos_core.bench.report import figure_page, format_table
from relpos_core.bench.run import _PRESET, check_device, run_benchmark
from relpos_core.budget import MAX_BUDGET
from relpos_core.cli import integer_in, number_in
from relpos_core.outputs import Output
from relpos_core.provenance import device_name

__all__ = ["parse_args", "main", "pin_allocator"]


def pin_allocator() -> dict | None:
    """Fix glibc malloc's thresholds for this process (the command line's, CPU); returns what was set, or None.

    By default glibc serves allocations above a *dynamic* threshold with fresh mmap'd
    pages, which page-fault on every call (about 3.5 us per 4 KiB page on the machine of
    the committed run), and moves the threshold with what the process freed before, so
    one row's time depended on the rows before it. Fixed, as a long-running process
    reaches: allocations up to 32 MiB (glibc's maximum threshold) reuse freed heap memory;
    larger ones are still mapped per call, and each row records its page faults per call.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if platform.system() != "Linux" or not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        settings = {"M_MMAP_THRESHOLD": (-3, 32 * 2**20), "M_TRIM_THRESHOLD": (-1, 2**30), "M_TOP_PAD": (-2, 64 * 2**20)}
        done = {key: value for key, (code, value) in settings.items() if libc.mallopt(code, value) == 1}
    except (OSError, AttributeError):  # not glibc
        return None
    return done or None


_UNITS = {"": 1, "b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _budget(text: str):
    raw = str(text).strip().lower().replace("_", "")
    if raw == "none":
        return None
    number = raw.rstrip("kmgtib")
    unit = raw[len(number):]
    if not number.isdigit() or unit not in _UNITS or int(number) * _UNITS[unit] < 1 \
            or int(number) * _UNITS[unit] > MAX_BUDGET:
        raise argparse.ArgumentTypeError(
            f"must be a whole number of bytes in [1, 2**62], optionally with a unit (KiB, MiB, GiB, TiB), "
            f"or 'none' for no limit, got {text!r}")
    return int(number) * _UNITS[unit]








_PRESET_BUDGET = object()  # not a string: argparse would pass a string default through _budget


def _slug(device) -> str:
    if device.type == "cpu":
        return "cpu"
    return "".join(c if c.isalnum() else "-" for c in device_name(device).lower()).strip("-")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m relpos_core.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None,
                    help="size preset (default: gpu with --gpu, quick with --quick, else cpu)")
    ap.add_argument("--quick", action="store_true", help="the quick preset (tests: tiny sizes, nothing compiled)")
    ap.add_argument("--gpu", action="store_true", help="the gpu preset: L up to 16384, B=1, H=16, d=64, bf16")
    ap.add_argument("--device", default=None, help="cpu or cuda[:N] (default: cuda for the gpu preset, else cpu)")
    ap.add_argument("--lengths", type=integer_in(1, MAX_LENGTH), nargs="+", default=None, metavar="L",
                    help=f"override the preset's sequence lengths (integers in [1, {MAX_LENGTH}])")
    ap.add_argument("--budget", type=_budget, default=_PRESET_BUDGET,
                    help="memory budget of rp.attend's guard: bytes (e.g. 1073741824 or 1GiB) or 'none'")
    ap.add_argument("--out", default=None, metavar="FILE.json",
                    help="result file; the HTML figure page is written beside it (default: ./relpos-results/"
                         "bench-<device>-<time>.json). A file inside the package or data/ is written only when "
                         "named here")
    ap.add_argument("--force", action="store_true", help="replace an existing result file and its figure page")
    ap.add_argument("--threads", type=integer_in(1, 4 * (os.cpu_count() or 1)), default=None,
                    help="torch intra-op threads on CPU (cpu preset: 1)")
    ap.add_argument("--repeats", type=integer_in(1, 100), default=None, help="timed bursts per row (preset's by default)")
    ap.add_argument("--spread-threshold", type=number_in(0, 10), default=None,
                    help="relative spread (q3 - q1) / median above which a row is re-measured, then flagged")
    ap.add_argument("--no-modules", action="store_true", help="skip the Hugging Face module rows")
    ap.add_argument("--no-figures", action="store_true", help="write no HTML figure page next to the JSON")
    ap.add_argument("--no-pin-allocator", action="store_true",
                    help="leave glibc malloc's thresholds alone (CPU runs pin them for this process by default)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    chosen = [name for name, flag in (("quick", args.quick), ("gpu", args.gpu)) if flag]
    if len(chosen) > 1:
        ap.error("--quick and --gpu: use one")
    if chosen and args.preset is not None and args.preset != chosen[0]:
        ap.error(f"--{chosen[0]} and --preset {args.preset} disagree: use one")
    args.preset = args.preset or (chosen[0] if chosen else "cpu")
    default_device = "cuda" if args.preset == "gpu" else "cpu"
    try:
        args.device = check_device(args.device or default_device)
    except ValueError as e:
        ap.error(f"argument --device: {e}")
    if args.threads is not None and args.device.type != "cpu":
        ap.error("argument --threads: applies to CPU runs only")
    args.output = Output.for_command_line(ap, args.out, tool=f"bench-{_slug(args.device)}", force=args.force)
    try:
        args.page = None if args.no_figures else args.output.sibling(".html")
    except ValueError as e:
        ap.error(f"argument --out: {e}")
    return args


def main(argv=None) -> int:
    """Run from the command line; returns the exit status (1 when a row failed, 130 when interrupted)."""
    args = parse_args(argv)
    output = args.output
    allocator = None
    if args.device.type == "cpu" and not args.no_pin_allocator:  # this process only: the command line's own
        settings = pin_allocator()
        if settings:
            why = " ".join(pin_allocator.__doc__.split("\n\n")[1].split())
            allocator = {"glibc mallopt": settings, "why": why}
    overrides = dict(lengths=args.lengths, threads=args.threads, repeats=args.repeats,
                     spread_threshold=args.spread_threshold, modules=False if args.no_modules else None)
    budget = _PRESET if args.budget is _PRESET_BUDGET else args.budget
    head = dict(preset=args.preset, device=str(args.device), command=" ".join(sys.argv))
    output.begin(head)
    with _one_interrupt():  # Ctrl-C ends the timing; a second one must not lose the result being written
        try:
            result = run_benchmark(args.preset, device=args.device, budget=budget, progress=not args.no_progress,
                                   on_row=output.add, allocator=allocator,
                                   **{k: v for k, v in overrides.items() if v is not None})
        except KeyboardInterrupt:  # outside the timing (preparing a row, the summary, the provenance)
            result = _rows_only(output, head)
        return _write(args, output, result)


class _one_interrupt:
    """SIGINT raises KeyboardInterrupt once; later ones are ignored, saying so, while the result is written."""

    def __enter__(self):
        self.seen = False

        def handler(signum, frame):
            if self.seen:
                print("\ninterrupted again: still writing what was measured (a moment)", file=sys.stderr)
                return
            self.seen = True
            raise KeyboardInterrupt

        try:
            self.previous = signal.signal(signal.SIGINT, handler)
        except ValueError:  # not the main thread: signals cannot be handled here
            self.previous = None
        return self

    def __exit__(self, *exc):
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
        return False


def _rows_only(output: Output, head: dict) -> dict:
    """The result of a run interrupted outside its timing: the rows of its partial file, no summary."""
    from relpos_core.bench.presets import SCHEMA
    from relpos_core.outputs import read_partial

    rows = read_partial(output.partial)[1] if output.partial.is_file() else []
    provenance = dict(head, interrupted="Ctrl-C outside the timing: the rows as prepared, no fits or summary")
    return dict(schema=SCHEMA, complete=False, provenance=provenance, rows=rows, fits=[], summary=None)


def _write(args, output: Output, result: dict) -> int:
    page = None
    if args.page is not None and result["complete"]:
        html = figure_page(result)
        if html is not None:
            args.page.write_text(html)
            page = str(args.page)
    result["provenance"]["figures"] = page
    output.finish(result, text=json.dumps(result, indent=1, default=str) + "\n")
    if "interrupted" in result["provenance"]:
        print(f"{len(result['rows'])} row(s) prepared: {result['provenance']['interrupted']}")
    else:
        print(format_table(result))
    missing = (" (no figure page: --no-figures)" if args.no_figures else
               " (no figure page for a peers run)" if result["schema"] != SCHEMA else
               " (plotly missing or interrupted: no page)")
    print(f"wrote {output.path}" + (f" and {page}" if page else missing))
    if not result["complete"]:
        print("the run was interrupted: the file holds what was measured (complete: false)", file=sys.stderr)
        return 130
    errors = [r for r in result["rows"] if r["status"] == "error"]
    if errors:
        print(f"{len(errors)} row(s) failed:", file=sys.stderr)
        for r in errors:
            print(f"  L={r['L']} {r.get('label') or r.get('contender')}: {r['reason']}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
