"""qworker's version (``qworker.__version__``): a module of its own, so the wire module can stamp it without reaching for
the package while the package is still being imported.  Raised with ``transport.wire.PROTOCOL``."""

__version__ = "0.3.0"
