"""The transport between producer, pools and workers: typed wire messages over
ZeroMQ sockets made by one factory.  Nothing here knows about rewards or leases."""
