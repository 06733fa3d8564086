"""Resume continues the W&B run (its id is kept in the checkpoint), and checkpoints are periodic by default."""

from __future__ import annotations

import json
import secrets
import sys
import types

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.contract.trainer.conftest import toy_config  # noqa: E402
from trainer.config import TrainConfig, config_from_dict  # noqa: E402
from trainer.loop import GRPOTrainer  # noqa: E402


class _Run:
    def __init__(self, run_id: str) -> None:
        self.id, self.logged = run_id, []

    def log(self, data: dict, step: int) -> None:
        self.logged.append(step)

    def finish(self) -> None:
        pass


@pytest.fixture
def fake_wandb(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """A stand-in for the wandb client, as the service behaves: ``init`` without ``id`` starts a new run
    under a fresh random 8-character id; with ``id`` and ``resume="allow"`` it continues that run."""
    calls: list[dict] = []

    def init(project: str, config: dict, id: str | None = None, resume: str | None = None, **_: object) -> _Run:
        calls.append({"project": project, "id": id, "resume": resume})
        return _Run(id if id and resume in ("allow", "must") else secrets.token_hex(4))

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    return calls


def test_resume_continues_the_wandb_run(tiny_model, toy_data, tmp_path, fake_wandb):
    run = tmp_path / "run"
    cfg = toy_config(tiny_model, toy_data, run, steps=2, prompts_per_step=2)
    cfg["log"]["wandb_project"] = "p"
    with GRPOTrainer(config_from_dict(cfg)) as t:
        t.run()
        first_id = t.sink.wandb_run_id
    assert first_id and fake_wandb[0]["id"] is None
    assert json.loads((run / "checkpoints" / "step-000002" / "trainer_state.json").read_text())["wandb_run_id"] == first_id
    cfg["train"]["steps"] = 3
    with GRPOTrainer(config_from_dict(cfg)) as t:
        assert [h["step"] for h in t.run()] == [2]
        assert t.sink.wandb_run_id == first_id
    assert fake_wandb[1] == {"project": "p", "id": first_id, "resume": "allow"}


def test_checkpoints_are_periodic_by_default():
    assert TrainConfig().checkpoint.every > 0   # 0 meant: a crash lost the whole run
