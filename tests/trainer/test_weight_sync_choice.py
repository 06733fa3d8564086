"""``rollout.vllm.weight_sync: auto`` picks the route measured fastest for the model's size
(``bench/weight_sync.py``; the figures are in ``trainer/rollout_vllm.py``): ``inprocess`` for a small
checkpoint on CPU, ``shm_file`` from ``AUTO_SHM_FILE_PARAMS`` parameters up, ``inprocess`` on CUDA.
No vLLM needed: the choice is made from the checkpoint's safetensors header before the engine starts."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainer.rollout_vllm import AUTO_SHM_FILE_PARAMS, resolve_weight_sync  # noqa: E402
from trainer.tiny import save_tiny_model  # noqa: E402


def test_auto_is_inprocess_below_the_measured_size_and_shm_file_from_it_on_cpu(tmp_path):
    small = save_tiny_model(tmp_path / "small")                          # 0.14 M parameters
    large = save_tiny_model(tmp_path / "large", hidden=256, layers=4, heads=4)   # 4.2 M
    assert resolve_weight_sync("auto", str(small), on_cuda=False)[0] == "inprocess"
    route, why = resolve_weight_sync("auto", str(large), on_cuda=False)
    assert route == "shm_file" and why == f"auto: on CPU, 4.23 M parameters, >= {AUTO_SHM_FILE_PARAMS / 1e6:g} M"
    assert resolve_weight_sync("auto", str(large), on_cuda=True)[0] == "inprocess"
    for route in ("inprocess", "rpc_bytes", "shm_file"):   # an explicit route is kept, whatever the size
        assert resolve_weight_sync(route, str(small), on_cuda=False) == (route, "set")
        assert resolve_weight_sync(route, str(large), on_cuda=False) == (route, "set")


def test_auto_on_cpu_takes_shm_file_when_the_checkpoint_size_is_unknown(tmp_path):
    assert resolve_weight_sync("auto", str(tmp_path / "Org/some-hub-model"), on_cuda=False)[0] == "shm_file"
