"""What every command line of qworker shares (public: ``qworker-train`` builds on ``Parser`` and ``guard``): the parser, boolean flags, ``--log-level``, CURVE flags, exit codes.

Exit codes, the same for ``qworker``, ``qworker-pool``, ``qworker-train`` and each subcommand:

* ``0``: done.
* ``1``: failed while running: tasks failed (``score --strict``, or every task
  failed), a service or producer did not answer, a runtime error.
* ``2``: refused at start, before any work: a usage mistake, a bad config, an
  unreadable input, a busy port, a missing optional dependency, a producer of
  another wire protocol (``qworker-pool``).  One line on stderr names the
  problem and the fix.
* ``130`` (128 + SIGINT): stopped by Ctrl-C; ``143`` for SIGTERM where a
  command reports it.

``Parser`` prints a usage mistake as one line (``PROG: error: ... (see PROG
--help)``) rather than the whole usage, and shows every option's default in
``--help``.  ``bool_flag`` is the one way a boolean becomes ``--flag`` /
``--no-flag``.  ``guard`` turns the expected failures of an entry point into
that one line and its exit code.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from typing import Any, Callable, NoReturn, Optional

from .._exceptions import ConfigError

__all__ = [
    "EXIT_OK", "EXIT_RUNTIME", "EXIT_USAGE", "EXIT_INTERRUPTED", "LOG_LEVELS", "Parser", "add_curve_client",
    "add_log_level", "bool_flag", "guard", "hidden_alias", "setup_logging",
]

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Formatter(argparse.HelpFormatter):
    """Shows every optional option's default: ``(default: X)`` after its help, unless the help already says
    it (an option whose absence means "not set" shows ``(default: none)``)."""

    def _get_help_string(self, action: argparse.Action) -> Optional[str]:
        text = action.help or ""
        default = action.default
        if not action.option_strings or action.required or default is argparse.SUPPRESS or "default" in text.lower():
            return text
        if default is None or (isinstance(default, (list, tuple)) and not default):
            return f"{text} (default: none)"
        if isinstance(default, bool):
            return f"{text} (default: {'on' if default else 'off'})"
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line and whose help shows defaults."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def bool_flag(ap: argparse.ArgumentParser | Any, name: str, *, help: str, default: Optional[bool] = False, dest: Optional[str] = None) -> None:
    """``--name`` / ``--no-name`` for one boolean (``dest`` defaults to the name with underscores); a name that is
    already negative (``no-cache``) is the one flag ``--no-cache``."""
    dest = dest or name.replace("-", "_")
    if name.startswith("no-"):
        ap.add_argument(f"--{name}", dest=dest, action="store_true", help=help)
    else:
        ap.add_argument(f"--{name}", dest=dest, action=argparse.BooleanOptionalAction, default=default, help=help)


def hidden_alias(ap: argparse.ArgumentParser | Any, flag: str, *, dest: str, **kwargs: Any) -> None:
    """An older spelling of an option, still accepted, not shown in ``--help``."""
    ap.add_argument(flag, dest=dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kwargs)


def tcp_port(text: str) -> int:
    """An argparse ``type``: a TCP port number, 0-65535 (0: any free port); else a usage error naming the value."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is out of range (0-65535)")
    return port


def add_log_level(ap: argparse.ArgumentParser, default: str = "WARNING") -> None:
    ap.add_argument("--log-level", default=default, type=str.upper, choices=LOG_LEVELS, metavar="LEVEL",
                    help=f"log messages of this level and above on stderr: {', '.join(LOG_LEVELS)}")


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)


def add_curve_client(ap: argparse.ArgumentParser) -> None:
    """The connecting side's CURVE flags and ``--insecure``, spelled as ``PoolOptions`` spells them."""
    ap.add_argument("--curve-secret-key", help="CURVE: this process's secret key file (NAME.key_secret from 'qworker keys')")
    ap.add_argument("--curve-server-key", help="CURVE: the server's public key file (NAME.key)")
    bool_flag(ap, "insecure", help="connect beyond loopback without CURVE without a warning (a trusted network only)")


def guard(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Wrap an entry point: ``ConfigError`` (and ``MissingExtra``) -> one line, exit 2; Ctrl-C -> exit 130.

    Anything else is a bug or a runtime failure the entry point did not expect and keeps its traceback.
    """

    def wrap(main: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(main)
        def run(*args: Any, **kwargs: Any) -> int:
            try:
                return main(*args, **kwargs)
            except ConfigError as exc:
                print(f"{prog}: {exc}", file=sys.stderr)
                return EXIT_USAGE
            except KeyboardInterrupt:
                print(f"{prog}: interrupted", file=sys.stderr)
                return EXIT_INTERRUPTED

        return run

    return wrap
