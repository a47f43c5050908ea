"""What the book's checks know about chapters that are not finished yet.

``PENDING`` maps a chapter to the standards it does not meet yet, because it is being
rewritten elsewhere (the lead's kernel-layer redesign). ``tests/test_book_pages.py``
turns each into a strict expected failure and ``tests/browser/test_book.py`` skips the
matching page check; remove an entry when its test passes (a strict xfail that passes
fails the run, so a finished chapter cannot stay listed).
"""
_REWRITE = {"seed", "captions", "pitfalls", "exercises", "line length", "hidden set-up",
            "visible code", "tables", "admonitions", "opener"}

# "math": a display equation wider than a phone's column (checked in the browser only,
# so not a strict xfail: look at the page at 390 px when removing it)
PENDING: dict[str, set[str]] = {
}
