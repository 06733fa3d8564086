"""Builds with setuptools (metadata in setup.cfg).  The wheel also carries the example rollouts and configs
inside the package, at ``qworker/_data/{examples,configs}`` (``qworker examples`` / ``qworker configs`` print
where), copied from the top-level ``examples/`` and ``configs/`` folders, which stay the one source."""

import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = {"examples": "*.jsonl", "configs": "*.yaml"}  # qworker/config/data.py's PATTERNS


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the source folders (qworker/config/data.py)
            return
        for kind, pattern in BUNDLED.items():
            target = os.path.join(self.build_lib, "qworker", "_data", kind)
            os.makedirs(target, exist_ok=True)
            for path in sorted(glob.glob(os.path.join(kind, pattern))):
                shutil.copyfile(path, os.path.join(target, os.path.basename(path)))


setup(cmdclass={"build_py": BuildWithData})
