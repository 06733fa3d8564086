"""Built-in rewards, registered when this package is imported (every worker does)."""

from . import diagnostic, gsm8k

__all__ = ["diagnostic", "gsm8k"]
