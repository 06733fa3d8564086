"""The host side: the pool supervisor (``qworker-pool``), its worker processes,
and the shared-memory slot through which the supervisor enforces hard limits.

``qworker-pool`` runs ``pool.Pool``; ``Producer(local_workers=N)`` starts one as a
child process through ``process.PoolProcess``.  Workers are started by their pool
as ``python -m qworker.host.worker``.
"""
