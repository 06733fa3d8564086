"""Launchers: start ``qworker-pool`` supervisors on many hosts from one place.

``qworker.launchers.ray`` starts one pool per node of a Ray cluster (``RayPools``,
``start_pools``, and the ``qworker ray-pools`` command).  Ray is an optional
extra (``pip install 'qworker-rl[ray]'``) and is imported only by that module, and
only when a launcher is used; importing this package imports nothing of Ray.

Launchers never spell pool options: they take a ``PoolOptions`` and change only
what they own (the endpoint, the worker count and the pool id per node).
"""
