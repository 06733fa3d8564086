"""The trainer's configuration error: a leaf module, so ``config`` and ``aliases`` both raise it without importing each other."""

from __future__ import annotations

__all__ = ["ConfigurationError"]


class ConfigurationError(ValueError):
    """A config key that is unknown, of the wrong type, or out of range; the message names it."""
