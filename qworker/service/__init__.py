"""The reward service: one producer for every process of a distributed trainer.

``server.RewardService`` serves ``qworker.Client``\\s over ZeroMQ;
``http.HttpFront`` serves the HTTP protocols OpenRLHF and slime speak.
``qworker serve`` runs both (``qworker.cli.serve``); ``client.Client`` is the trainer processes' side.
"""
