"""Execute the book's pages two at a time into the cache the book build reads.

``jupyter-book build`` executes the pages one after the other (``execute_notebooks: cache``
in ``_config.yml``: a page whose code cells are unchanged comes from the jupyter-cache in
``_build/.jupyter_cache``). On a 2-core machine that leaves a core idle for most of the
build. This script runs the pages the cache does not hold yet in ``--workers`` processes,
each in its own folder as the book build does (the notebook's folder; the same
``single_nb_execution`` of jupyter-cache that myst-nb calls, the cell timeout of
``_config.yml``), and stores each page that ran without an error in that cache. The book
build then renders them from the cache, and checks their outputs as always (stderr is a
warning, ``-W`` an error). A page that fails or hangs twice is not stored: the build
executes it again and reports the error there, so nothing is hidden.

Usage: python tools/prime_book_cache.py [--workers N] [PAGE.ipynb ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".jupyter_cache"


def book_pages() -> list[Path]:
    """The notebooks of ``_toc.yml`` (the root page included), in the book's order."""
    import yaml

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return [ROOT / f"{name}.ipynb" for name in files if (ROOT / f"{name}.ipynb").exists()]


def cell_timeout() -> int:
    import yaml

    return int(yaml.safe_load((ROOT / "_config.yml").read_text())["execute"]["timeout"])


def execute(path: str, timeout: int) -> tuple[str, str | None, float, str | None]:
    """Run one page in its folder (twice if the kernel hangs); the executed notebook as JSON."""
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution

    for attempt in (1, 2):
        notebook = nbformat.read(path, as_version=4)
        result = single_nb_execution(notebook, cwd=str(Path(path).parent), timeout=timeout,
                                     allow_errors=False, meta_override=True)
        if result.err is None:
            return path, nbformat.writes(notebook), result.time, None
        hung = type(result.err).__name__ in ("CellTimeoutError", "DeadKernelError")
        if not hung or attempt == 2:
            return path, None, result.time, f"{type(result.err).__name__}: {str(result.err)[:300]}"
    raise AssertionError("unreachable")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pages", nargs="*", type=Path, help="notebooks (default: every page of _toc.yml)")
    ap.add_argument("--workers", type=int, default=2, help="pages run at the same time (default 2)")
    args = ap.parse_args(argv)
    if args.workers < 1:
        ap.error(f"argument --workers: must be at least 1, got {args.workers}")
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(str(CACHE))
    pages = [p.resolve() for p in args.pages] or book_pages()
    todo = []
    for page in pages:
        try:
            cache.match_cache_notebook(nbformat.read(page, as_version=4))
        except KeyError:
            todo.append(page)
    print(f"prime_book_cache: {len(pages) - len(todo)} of {len(pages)} page(s) already cached; "
          f"running {len(todo)} with {args.workers} worker(s)", flush=True)
    failed, started = [], time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        jobs = [pool.submit(execute, str(page), cell_timeout()) for page in todo]
        for job in as_completed(jobs):
            path, executed, seconds, error = job.result()
            name = Path(path).relative_to(ROOT)
            if error is not None:
                failed.append(str(name))
                print(f"  {name}: not cached ({error}); the book build runs it again", flush=True)
                continue
            cache.cache_notebook_bundle(
                CacheBundleIn(nbformat.reads(executed, as_version=4), path,
                              data={"execution_seconds": seconds}),
                check_validity=False, overwrite=True)
            print(f"  {name}: executed in {seconds:.0f} s, cached", flush=True)
    print(f"prime_book_cache: {time.perf_counter() - started:.0f} s"
          + (f"; {len(failed)} page(s) left to the book build: {', '.join(failed)}" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
