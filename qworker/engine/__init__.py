"""The engine: the producer, its dispatcher and scheduler, tasks and their leases, futures and results.

``producer.Producer`` submits and gathers; ``dispatcher`` runs the reactor thread that drives
``scheduler.Scheduler`` (credit, leases, redelivery) over ``pending.PendingTable`` (what is in flight)
and ``fleet`` (pools and workers); ``task.Pending`` is one task and its transitions.
"""
