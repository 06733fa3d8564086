"""What the vLLM rollout cannot run is refused when the trainer starts, in one line naming the fix, before
any engine, policy or reward pool: a head size vLLM's CPU attention has no kernel for, and a prompt that
with its new tokens does not fit ``max_model_len`` (training data and evaluation data).  No vLLM needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.contract.trainer.conftest import toy_config  # noqa: E402
from trainer.cli import main as train_main  # noqa: E402
from trainer.config import ConfigurationError, config_from_dict  # noqa: E402
from trainer.loop import GRPOTrainer  # noqa: E402
from trainer.preflight import CPU_HEAD_SIZES, PromptLengths, check_head_size  # noqa: E402
from trainer.tiny import save_tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def default_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("default-tiny") / "model")


def vllm_config(model: Path, data: Path, log_dir: Path, **vllm: object) -> dict:
    cfg = toy_config(model, data, log_dir, steps=2, prompts_per_step=4)
    cfg["rollout"].update(backend="vllm", vllm=dict(vllm))
    cfg["train"]["device"] = "cpu"
    return cfg


def write_rows(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "ground_truth": "1"}) + "\n" for p in prompts))
    return path


def test_the_default_tiny_model_has_a_head_size_vllms_cpu_attention_runs(default_tiny):
    config = json.loads((default_tiny / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] in CPU_HEAD_SIZES
    check_head_size(str(default_tiny), CPU_HEAD_SIZES)   # accepted


def test_a_head_size_vllms_cpu_attention_lacks_stops_the_trainer_at_start_naming_the_fix(tiny_model, toy_data, tmp_path, capsys):
    """``tiny_model`` has 4 heads of 16 (vLLM on CPU: "Unsupported CPU attention configuration" at the first generation)."""
    cfg = vllm_config(tiny_model, toy_data, tmp_path / "run")
    with pytest.raises(ConfigurationError, match=r"heads of 16 .*python -m trainer\.tiny --heads 2 \(heads of 32\)"):
        GRPOTrainer(config_from_dict(cfg))
    path = tmp_path / "cfg.json"   # YAML is a superset of JSON
    path.write_text(json.dumps(cfg))
    assert train_main(["--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("qworker-train: model.path: ") and "--heads 2" in err[0]


def test_a_training_prompt_too_long_for_max_model_len_is_refused_at_start_naming_its_line(default_tiny, tmp_path):
    data = write_rows(tmp_path / "d.jsonl", ["copy:1=", "copy:2=", "copy:3=", "copy:4=", "9" * 40, "copy:5=", "8" * 50])
    cfg = vllm_config(default_tiny, data, tmp_path / "run", max_model_len=32)
    with pytest.raises(ConfigurationError) as exc:
        GRPOTrainer(config_from_dict(cfg))
    assert str(exc.value) == (
        f"data.path: {data} line 5: a prompt of 40 tokens plus rollout.max_new_tokens 2 exceeds rollout.vllm.max_model_len 32 "
        "(and 1 more rows); raise rollout.vllm.max_model_len, lower rollout.max_new_tokens or drop longer rows with "
        "data.max_prompt_length: 30")
    cfg["data"]["max_prompt_length"] = 30   # the fix it names: the long rows are dropped, the rest fit
    cfg["rollout"]["backend"] = "hf"        # (so that this test starts no vLLM engine)
    GRPOTrainer(config_from_dict(cfg)).close()


def test_evaluation_prompts_are_checked_with_eval_max_new_tokens(default_tiny, toy_data, tmp_path):
    held = write_rows(tmp_path / "held.jsonl", ["copy:1=", "copy:2=" * 3])    # 7 and 21 tokens
    cfg = vllm_config(default_tiny, toy_data, tmp_path / "run", max_model_len=32)
    cfg["eval"] = {"data": str(held), "max_new_tokens": 12}
    with pytest.raises(ConfigurationError, match=rf"^eval\.data: {held} line 2: a prompt of 21 tokens plus eval\.max_new_tokens 12 exceeds"):
        GRPOTrainer(config_from_dict(cfg))
    cfg["eval"]["max_prompts"] = 1     # the evaluation uses only the first row, which fits
    cfg["rollout"]["vllm"]["max_model_len"] = 18
    with pytest.raises(ConfigurationError, match=r"^eval\.data: .* line 1: a prompt of 7 tokens plus eval\.max_new_tokens 12 exceeds rollout\.vllm\.max_model_len 18"):
        GRPOTrainer(config_from_dict(cfg))


def test_the_engines_own_limit_is_named_when_max_model_len_is_not_set():
    lengths = PromptLengths(key="data.path", path="d.jsonl", lines=[1, 3], tokens=[10, 600], new_tokens_key="rollout.max_new_tokens", new_tokens=8)
    lengths.check(608)
    with pytest.raises(ConfigurationError, match=r"^data\.path: d\.jsonl line 3: a prompt of 600 tokens plus rollout\.max_new_tokens 8 exceeds "
                                                 r"the vLLM engine's max_model_len 512 \(the model's; rollout\.vllm\.max_model_len is null\); "
                                                 r"lower rollout\.max_new_tokens or drop longer rows with data\.max_prompt_length: 504$"):
        lengths.check(512, from_model=True)
