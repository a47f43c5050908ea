"""Execute pages of the book and keep what a reader would see (tools/gpu_check.sh uses it).

Each notebook runs alone in an empty scratch folder (as in Colab), with a timeout per
cell; the executed copy, outputs included, is written to ``--out``. A kernel that hangs
with nothing to do (nbclient with ipykernel 7 does now and then; seen here once in
chapters/08_the_kv_cache.ipynb) hits the timeout, and the page is run once more in a fresh kernel; a second
timeout is reported as a failure. Every line a cell
writes to stderr and every error is reported, and so is each "Live measurements here run on ..." sentence
(``rp.measure.device.pick().sentence``: which device ran). The exit status is 1 if any
cell failed or wrote to stderr.

Usage: python tools/run_pages.py --out DIR chapters/08_the_kv_cache.ipynb ...
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path


def run_page(path: Path, out: Path, timeout: int) -> list[str]:
    """Execute ``path`` in an empty folder; write the executed copy to ``out``; return the problems."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    problems = []
    started = time.perf_counter()
    for attempt in (1, 2):
        notebook = nbformat.read(path, as_version=4)
        folder = Path(tempfile.mkdtemp(prefix=f"relpos-page-{path.stem}-"))
        try:
            client = NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                                    resources={"metadata": {"path": str(folder)}})
            try:
                client.execute()
                break
            except (CellTimeoutError, DeadKernelError) as err:
                message = f"attempt {attempt}: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
                print(f"{path.name}: {message}" + ("; running it once more" if attempt == 1 else ""), flush=True)
                if attempt == 2:
                    problems.append(message)
            except CellExecutionError as err:
                problems.append(f"a cell failed: {str(err).splitlines()[-1] if str(err) else err!r}")
                break
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, out / path.name)
    for index, cell in enumerate(notebook.cells):
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            if output.get("output_type") == "stream" and output.get("name") == "stderr" and text.strip():
                problems.append(f"cell {index} wrote to stderr: {text.strip()[:500]}")
            if output.get("output_type") == "stream" and "Live measurements here run on" in text:
                for line in text.splitlines():
                    if line.startswith("Live measurements here run on"):
                        print(f"{path.name}, cell {index}: {line}")
    print(f"{path.name}: {time.perf_counter() - started:.0f} s, "
          f"{'ok' if not problems else f'{len(problems)} problem(s)'}; executed copy in {out / path.name}",
          flush=True)
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+")
    parser.add_argument("--out", required=True, help="folder for the executed copies")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell (default 300)")
    args = parser.parse_args(argv)
    status = 0
    for name in args.notebooks:
        path = Path(name)
        if not path.is_file():
            print(f"error: no notebook {name}", file=sys.stderr)
            return 2
        for problem in run_page(path.resolve(), Path(args.out), args.timeout):
            print(f"{path.name}: {problem}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
