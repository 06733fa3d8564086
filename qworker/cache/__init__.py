"""The result cache: content hashes, the memory tier and the on-disk file."""
