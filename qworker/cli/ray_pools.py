"""``qworker ray-pools``: run ``qworker.launchers.ray.RayPools`` until stopped (the command line calls the launcher)."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Optional

from .._exceptions import ConfigError
from ..launchers.ray import DEFAULT_POLL_S, NoRay, RayPools, import_ray
from .args import EXIT_INTERRUPTED, Parser, bool_flag
from .main import add_pool_arguments, pool_options

__all__ = ["main"]

log = logging.getLogger("qworker.ray")


def main(argv: Optional[list[str]] = None, prog: str = "qworker ray-pools") -> int:
    """Run ``RayPools`` until SIGTERM or Ctrl-C; exit code 0 after a clean stop, 1 when Ray
    cannot be joined, 2 on bad options."""
    ap = Parser(prog=prog, description="Run one qworker pool on every node of a Ray cluster until stopped.")
    ap.add_argument("--address", default="auto", help="Ray cluster address for ray.init")
    ap.add_argument("--workers-per-node", type=int, help="workers in each pool (default: --workers, else the node's CPUs)")
    bool_flag(ap, "reserve-cpus", help="each pool's actor holds as many Ray CPUs as it has workers")
    ap.add_argument("--poll", type=float, default=DEFAULT_POLL_S, help="seconds between looks at the cluster's nodes")
    add_pool_arguments(ap)
    args = ap.parse_args(argv)
    try:
        options = pool_options(args, prog)
        if args.workers_per_node is not None and args.workers_per_node < 1:
            raise ConfigError(f"--workers-per-node must be at least 1, got {args.workers_per_node}")
        import_ray()
    except (ConfigError, NoRay) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=options.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        import_ray().init(address=args.address, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        print(f"{prog}: cannot join the Ray cluster at {args.address}: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()
    stopped_by: list[int] = []  # the signal that stopped it: Ctrl-C exits 130 (``cli.args``), SIGTERM 0

    def on_signal(sig: int, _frame: object) -> None:
        stopped_by.append(sig)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):  # after ray.init, which installs handlers of its own
        signal.signal(sig, on_signal)
    pools = RayPools(options=options, workers_per_node=args.workers_per_node, reserve_cpus=args.reserve_cpus, poll_s=args.poll)
    pools.start()
    log.info("ray pools: %d pool(s) serving %s; SIGTERM or Ctrl-C to stop", len(pools.pools()), options.connect)
    while not stop.wait(1.0):
        pass
    pools.stop()
    return EXIT_INTERRUPTED if stopped_by[:1] == [signal.SIGINT] else 0
