"""What a reward is: the ``@reward`` decorator, name resolution, composites and fingerprints."""
