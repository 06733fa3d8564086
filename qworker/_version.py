"""qworker's version (``qworker.__version__``): a module of its own, so the wire can stamp it without importing the package."""

__version__ = "0.1.0"
