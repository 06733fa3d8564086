"""qworker's version (``qworker.__version__``) and the wire protocol it speaks, side by side so that they are raised
together: a release that changes a message (``transport.wire``, ``transport.client_wire``) raises both, so that a
refusal between two versions names two different releases (its advice is to install the same one on both sides).
A module of its own, so the wire module can stamp them without reaching for the package while it is being imported."""

__version__ = "0.4.0"
WIRE_PROTOCOL = 4  # ``transport.wire.PROTOCOL``
