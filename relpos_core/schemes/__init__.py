"""What each scheme computes: one module per scheme (see CONTRIBUTING.md)."""
import importlib

_MODULES = ("absolute", "shaw", "music_transformer", "transformer_xl", "t5", "deberta", "alibi", "rope", "conventions")


def __getattr__(name):  # TEMPORARY during development; replaced by explicit imports
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
