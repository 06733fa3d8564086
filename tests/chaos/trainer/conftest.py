"""The trainer's fixtures (a tiny local model, the toy data), shared with tests/contract/trainer."""

from __future__ import annotations

from tests.contract.trainer.conftest import tiny_model, toy_data  # noqa: F401  (fixtures, found by name)
