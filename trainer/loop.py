"""The GRPO loop, with rewards overlapped with the GPU work.

One step (``GRPOTrainer.step``):

1. ``generate``: ``prompts_per_step`` prompts, ``num_generations`` samples each, in ``rollout.chunks``
   calls.  With ``train.overlap`` each group's rewards are submitted to the qworker ``Producer`` as
   soon as its chunk exists; the futures come back at once.
2. ``logprobs``: old (and reference) log-probs on the policy, while the pool scores.
3. ``update``: groups are consumed in the order their rewards arrive; a group's advantages need only
   its own rewards (``train.advantage``), so backward passes start on the first groups scored while
   the rest are still being scored.  The driver blocks (``reward_wait``) only when no scored
   sequence is left to train on.  Every ``mini_batch_size`` sequences the accumulated gradient is
   normalised (token or sequence count), clipped, and applied.  With ``train.ppo_epochs`` E > 1 the
   whole batch is then trained on E - 1 more times, in the same order and mini-batches, against the
   same old log-probs (PPO's epochs; the clipped ratio now moves away from 1).
4. ``weight_sync``: the policy's weights into the rollout engine.

With ``train.overlap: false`` the step scores every rollout right after generation and waits for all
of it before the log-probs (ReasonRL's order): the same algorithm, only the timing differs.
Arrival order changes only the order in which micro-batch gradients are summed within a mini-batch,
i.e. floating-point rounding (and, with several mini-batches per step, which groups share one).

``train.off_policy: true`` (one-step off-policy, as verl's one-step-off-policy recipe): while step t
waits for its rewards and updates the policy, a background thread generates step t+1's batch and
submits its rewards group by group.  Only then are the weights synced (the driver joins the thread
first, so a sync never races a generation in flight).  So step t+1's samples come from the weights
synced after step t-1's update: they are exactly one update behind the policy that trains on them
(step 0's, and the first step after a resume, are generated in the step and are on-policy).  The
metric ``staleness`` is that lag in updates.  Correctness:

- the PPO ratio's "old" log-probs are the *sampling* policy's: the rollout actor computes them with
  its own weights (vLLM while sampling; the hf actor with ``rollout.logprobs``, the policy actor's code
  in ``logprobs.py``) right after each chunk is generated, before any sync can change them.  The policy actor no longer holds those
  weights when the batch exists (its update is under way), and a second copy of the policy would
  double its memory; the rollout already holds them.  The clipped ratio pi_t / pi_(t-1) thus
  corrects for the one step of staleness, as PPO's ratio does for its own later mini-batches;
- advantages are per group, from that group's rewards, as on-policy; reference log-probs (KL) come
  from the policy actor's reference, which does not change.

The rollout actor supplies them either with each completion (``logprobs``: vLLM records the sampled
tokens' log-probs while sampling, at no extra cost) or from its ``logprobs`` method (the hf one).  On the
``local`` backend the thread overlaps the two models' torch kernels, which release the GIL; on ``ray``
the rollout is its own actor anyway.  Checkpoints store the sampler's position *before* the prefetched
batch: a run resumed from one regenerates that batch with the checkpoint's weights (on-policy, once).
"""

from __future__ import annotations

import collections
import concurrent.futures
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from trainer import checkpoint as ckpt
from trainer.config import TrainConfig
from trainer.data import PromptSampler, load_numbered_prompts
from trainer.evaluate import Evaluator
from trainer.grpo import group_advantages
from trainer.metrics import MetricsSink
from trainer.placement import Placement, make_actors
from trainer.preflight import check_vllm_start
from trainer.rewards import RewardClient, build_payloads
from trainer.schedule import lr_multiplier
from trainer.stats import batch_stats, component_scores
from trainer.timeline import RewardClock, StepTimeline

__all__ = ["GRPOTrainer", "Group"]


@dataclass
class Group:
    """One prompt's samples and, once scored, their rewards and advantages."""

    index: int
    row: dict[str, Any]
    completions: list[dict[str, Any]]
    futures: list = field(default_factory=list)
    done: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    rewards: Optional[list[float]] = None
    advantages: Optional[list[float]] = None
    extras: list = field(default_factory=list)  # the rewards' Result.extra (a composite's components)
    version: int = 0  # the number of steps whose updates were in the weights that sampled it


def _when_all_done(futures: list, done: concurrent.futures.Future) -> None:
    """Resolve ``done`` once every future of ``futures`` has resolved (any thread)."""
    left = [len(futures)]
    lock = threading.Lock()

    def one(_f: object) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            done.set_result(None)

    if not futures:
        done.set_result(None)
    for f in futures:
        f.add_done_callback(one)


def _split(rows: list, parts: int) -> list[list]:
    size, extra = divmod(len(rows), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(rows[start:end])
        start = end
    return [c for c in out if c]


class GRPOTrainer:
    """Builds the reward client, the actors and the sinks from ``cfg``; ``run()`` trains; ``close()`` stops all."""

    def __init__(self, cfg: TrainConfig, placement: Optional[Placement] = None) -> None:
        self.cfg = cfg
        t = cfg.train
        random.seed(t.seed)
        torch.manual_seed(t.seed)
        rows, self.data_dropped, lines = load_numbered_prompts(cfg.data.path, cfg.model.path, cfg.data.max_prompt_length)
        eval_rows: Optional[list[dict[str, Any]]] = None
        eval_lines: list[int] = []
        if cfg.eval.data:
            eval_rows, _, eval_lines = load_numbered_prompts(cfg.eval.data, cfg.model.path, cfg.data.max_prompt_length, "eval")
        # vLLM's limits (head size, prompt lengths), checked before anything starts: one line, not a failure at step N
        prompt_lengths = check_vllm_start(cfg, rows, lines, eval_rows, eval_lines)
        self.sampler = PromptSampler(rows, t.prompts_per_step, seed=t.seed, shuffle=cfg.data.shuffle)
        self.ckpt_root = Path(cfg.log.dir) / "checkpoints"
        self.start_step = 0
        resume_from = ckpt.latest(self.ckpt_root) if cfg.checkpoint.resume else None
        wandb_run_id: Optional[str] = None
        if resume_from is not None:
            state = ckpt.read_state(resume_from)
            wandb_run_id = state.get("wandb_run_id")
            self.start_step = int(state["step"])
            self.sampler.load_state(state["sampler"])
            print(f"resuming from {resume_from} at step {self.start_step}", flush=True)
        # the reward pool first: its workers start while the models load
        self.rewards = RewardClient(cfg.reward.name, cfg.reward.params, cfg.reward.modules, cfg.qworker, cfg.reward.gather_timeout_s)
        actors: Optional[Placement] = None
        try:
            self.actors = actors = placement or make_actors(cfg, init_from=str(resume_from) if resume_from else None)
            if prompt_lengths and cfg.rollout.vllm.max_model_len is None:   # the limit the engine derived from the model
                limit = int(actors.rollout.call("token_limit"))
                for lengths in prompt_lengths:
                    lengths.check(limit, from_model=True)
            if resume_from is not None:
                self.actors.sync_weights()
        except BaseException:
            if actors is not None:
                actors.shutdown()
            self.rewards.close()
            raise
        self.evaluator = None if eval_rows is None else Evaluator(
            cfg=cfg.eval, rows=eval_rows, rollout=self.actors.rollout, rewards=self.rewards,
            max_new_tokens=cfg.rollout.max_new_tokens, batch_prompts=t.prompts_per_step)
        log = cfg.log
        self.sink = MetricsSink(
            jsonl_path=str(Path(log.dir) / "metrics.jsonl") if log.jsonl else None,
            tensorboard_dir=str(Path(log.dir) / "tensorboard") if log.tensorboard else None,
            wandb_project=log.wandb_project, wandb_config=cfg.to_dict(), print_every=log.print_every,
            resume=resume_from is not None, wandb_run_id=wandb_run_id,
        )
        self.history: list[dict[str, Any]] = []
        self.eval_history: list[dict[str, float]] = []  # every evaluation's metrics, in order
        self.rollout_version = self.start_step  # steps whose updates the rollout's weights hold
        # off-policy: the prefetched batch (groups, reward clock), the thread that makes it, and the
        # sampler's position before it was drawn (what a checkpoint saves)
        self._next: Optional[tuple[list[Group], RewardClock]] = None
        self._sampler_state: Optional[dict[str, int]] = None
        self._prefetcher: Optional[concurrent.futures.ThreadPoolExecutor] = None
        if t.off_policy:
            self._prefetcher = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="qworker-rollout", initializer=torch.set_num_threads, initargs=(torch.get_num_threads(),))

    # ---- rewards ------------------------------------------------------------------------------------
    def _submit(self, g: Group, clock: RewardClock) -> None:
        g.futures = self.rewards.submit(build_payloads(g.row, g.completions, self.cfg.rollout.max_new_tokens))
        clock.mark_submit()
        for f in g.futures:
            f.add_done_callback(clock.mark_result)
        _when_all_done(g.futures, g.done)

    def _collect(self, g: Group) -> None:
        g.rewards, results = self.rewards.scores(g.futures)
        g.extras = [r.extra for r in results]
        g.advantages = group_advantages(torch.tensor([g.rewards]), self.cfg.train.advantage)[0].tolist()

    @staticmethod
    def _items(g: Group) -> list[dict[str, Any]]:
        assert g.advantages is not None, "a group's items exist once it is scored"
        return [
            {"prompt_ids": c["prompt_ids"], "completion_ids": c["completion_ids"], "advantage": a,
             "old_logp": c["old_logp"], "ref_logp": c.get("ref_logp")}
            for c, a in zip(g.completions, g.advantages, strict=True)
        ]

    # ---- one step -----------------------------------------------------------------------------------
    def _generate(self, step: int, rows: list[dict[str, Any]], tl: StepTimeline, clock: RewardClock, submit: bool) -> list[Group]:
        """Sample step ``step``'s groups for ``rows`` in ``rollout.chunks`` calls (timed as ``generate``
        on ``tl``).  With ``submit`` each group's rewards go to the pool as soon as its chunk exists
        (timed on ``clock``).  Off-policy, each chunk's old log-probs are then computed by the rollout
        actor, on the weights that sampled it (timed as ``logprobs``).  Runs on the prefetch thread
        off-policy: it only reads ``rollout_version``, which the driver changes after joining it."""
        t, r = self.cfg.train, self.cfg.rollout
        groups: list[Group] = []
        for k, chunk in enumerate(_split(rows, r.chunks)):
            with tl.phase("generate"):
                outs = self.actors.rollout.call(
                    "generate", [row["prompt"] for row in chunk], r.num_generations, r.max_new_tokens,
                    r.temperature, r.top_p, seed=t.seed * 1_000_003 + step * 101 + k,
                )
            new = [Group(len(groups) + i, row, comps, version=self.rollout_version) for i, (row, comps) in enumerate(zip(chunk, outs, strict=True))]
            groups += new
            if submit:
                for g in new:
                    self._submit(g, clock)
            if t.off_policy:
                comps = [c for g in new for c in g.completions]
                if all("logprobs" in c for c in comps):   # vLLM: recorded while sampling
                    for c in comps:
                        c["old_logp"] = c["logprobs"]
                    continue
                with tl.phase("logprobs"):
                    lp = self.actors.rollout.call("logprobs", [(c["prompt_ids"], c["completion_ids"]) for c in comps],
                                                  r.temperature, t.micro_batch_size)
                for c, old in zip(comps, lp, strict=True):
                    c["old_logp"] = old
        return groups

    def step(self, step: int) -> dict[str, Any]:
        """Run training step ``step`` (0-based) and return its metrics (see ``timeline`` for the times)."""
        t = self.cfg.train
        if t.off_policy:
            return self._step_off_policy(step)
        tl = StepTimeline()
        groups = self._generate(step, self.sampler.next_batch(), tl, tl.rewards, submit=t.overlap)
        if not t.overlap:
            with tl.phase("reward_wait"):
                for g in groups:
                    self._submit(g, tl.rewards)
                for g in groups:
                    self._collect(g)
        with tl.phase("logprobs"):
            seqs = [(c["prompt_ids"], c["completion_ids"]) for g in groups for c in g.completions]
            lp = self.actors.policy.call("logprobs", seqs)
        for i, c in enumerate(c for g in groups for c in g.completions):
            c["old_logp"] = lp["old"][i]
            if lp["ref"] is not None:
                c["ref_logp"] = lp["ref"][i]
        stats = self._update(groups, tl, step)
        with tl.phase("weight_sync"):
            self.actors.sync_weights()
        self.rollout_version = step + 1
        return self._metrics(step, groups, stats, tl)

    def _step_off_policy(self, step: int) -> dict[str, Any]:
        """Step ``step`` of one-step off-policy training (see the module docstring): train on the batch
        prefetched during the step before (or generate it now, when there is none) while the
        prefetch thread generates and submits step ``step + 1``'s; join it, then sync the weights."""
        t = self.cfg.train
        if self._next is None:  # the first step, or the first after a resume
            tl = StepTimeline()
            groups = self._generate(step, self.sampler.next_batch(), tl, tl.rewards, submit=True)
        else:
            groups, clock = self._next
            self._next = None
            tl = StepTimeline(clock)
        self._sampler_state = self.sampler.state()
        pending, next_clock = None, RewardClock()
        if step + 1 < t.steps:
            assert self._prefetcher is not None
            pending = self._prefetcher.submit(self._generate, step + 1, self.sampler.next_batch(), tl, next_clock, True)
        try:
            if t.kl_coef > 0:
                with tl.phase("logprobs"):
                    ref = self.actors.policy.call("logprobs", [(c["prompt_ids"], c["completion_ids"]) for g in groups for c in g.completions], False)["ref"]
                for c, r in zip((c for g in groups for c in g.completions), ref, strict=True):
                    c["ref_logp"] = r
            stats = self._update(groups, tl, step)
        finally:
            if pending is not None:  # never leave a generation running into a sync, a save or a close
                with tl.phase("rollout_wait"):
                    concurrent.futures.wait([pending])
        if pending is not None:
            self._next = (pending.result(), next_clock)
        with tl.phase("weight_sync"):
            self.actors.sync_weights()
        self.rollout_version = step + 1
        return self._metrics(step, groups, stats, tl)

    def _metrics(self, step: int, groups: list[Group], stats: dict[str, float], tl: StepTimeline) -> dict[str, Any]:
        rewards = torch.tensor([x for g in groups for x in g.rewards or []])
        return {
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()) if len(rewards) > 1 else 0.0,
            **batch_stats([g.completions for g in groups], [g.rewards or [] for g in groups],
                          component_scores(x for g in groups for x in g.extras)),
            "reward_failures": self.rewards.failures,
            "staleness": float(step - min(g.version for g in groups)),
            **stats,
            **tl.summary(),
        }

    def _update(self, groups: list[Group], tl: StepTimeline, step: int) -> dict[str, float]:
        t = self.cfg.train
        total = sum(len(g.completions) for g in groups)
        mini = t.mini_batch_size or total
        lr = t.lr * lr_multiplier(step, t.steps, t.lr_schedule, t.warmup_ratio, t.min_lr_ratio)
        queue: collections.deque = collections.deque()
        seen: list[dict[str, Any]] = []   # every item, in the order the first epoch trained on them
        pending = []
        for g in groups:
            if g.rewards is not None:
                queue.extend(self._items(g))
            else:
                pending.append(g)
        summed = ("loss_sum", "denominator", "clipped_tokens", "kl_sum", "tokens", "entropy_sum")
        sums = dict.fromkeys(summed, 0.0)
        acc = {"in_mini": 0, "denom": 0.0, "steps": 0, "grad_norm": 0.0}

        def train_on(micro: list[dict[str, Any]], last: bool) -> None:
            """Forward/backward ``micro``; step the optimizer when the mini-batch is full or ``last``."""
            with tl.phase("update"):
                s = self.actors.policy.call("accumulate", micro)
            acc["in_mini"] += len(micro)
            acc["denom"] += s["denominator"]
            for k in summed:
                sums[k] += s[k]
            if acc["in_mini"] == mini or last:
                with tl.phase("update"):
                    acc["grad_norm"] = self.actors.policy.call("optimizer_step", acc["denom"], lr)["grad_norm"]
                acc.update(in_mini=0, denom=0.0, steps=acc["steps"] + 1)

        while queue or pending:
            need = min(t.micro_batch_size, mini - int(acc["in_mini"]))
            if len(queue) >= need or (queue and not pending):
                micro = [queue.popleft() for _ in range(min(need, len(queue)))]
                seen += micro
                train_on(micro, last=not queue and not pending)
                continue
            with tl.phase("reward_wait"):
                done, _ = concurrent.futures.wait([g.done for g in pending], timeout=self.cfg.reward.gather_timeout_s,
                                                  return_when=concurrent.futures.FIRST_COMPLETED)
                if not done:
                    raise TimeoutError(f"no reward group resolved within {self.cfg.reward.gather_timeout_s} s")
                ready = [g for g in pending if g.done.done()]
                pending = [g for g in pending if g not in ready]
                for g in ready:
                    self._collect(g)
                    queue.extend(self._items(g))
        for _ in range(t.ppo_epochs - 1):   # PPO's further epochs: every item is scored by now
            for m0 in range(0, len(seen), mini):
                batch = seen[m0 : m0 + mini]
                for u0 in range(0, len(batch), t.micro_batch_size):
                    train_on(batch[u0 : u0 + t.micro_batch_size], last=u0 + t.micro_batch_size >= len(batch))
        tokens = max(sums["tokens"], 1.0)
        return {
            "loss": sums["loss_sum"] / max(sums["denominator"], 1e-8),
            "clip_frac": sums["clipped_tokens"] / tokens,
            "kl": sums["kl_sum"] / tokens,
            "entropy": sums["entropy_sum"] / tokens,
            "grad_norm": acc["grad_norm"],
            "lr": lr,
            "optimizer_steps": int(acc["steps"]),
        }

    # ---- the run ------------------------------------------------------------------------------------
    def evaluate(self, updates: int) -> dict[str, float]:
        """The held-out evaluation now (``eval``; {} without ``eval.data``), with its line printed."""
        if self.evaluator is None:
            return {}
        m = self.evaluator.run(updates)
        self.eval_history.append(m)
        return m

    def run(self) -> list[dict[str, Any]]:
        """Train from ``start_step`` to ``train.steps``; checkpoint every ``checkpoint.every`` steps and at
        the end; evaluate on ``eval.data`` before the first step, every ``eval.every_n_steps`` and after
        the last (each evaluation goes into the record of the step it precedes; the last into a record
        of its own, at step ``train.steps``)."""
        c = self.cfg.checkpoint
        step = self.start_step
        for step in range(self.start_step, self.cfg.train.steps):
            ev = self.evaluate(step) if self.evaluator is not None and self.evaluator.due(step, self.start_step) else {}
            m = {**self.step(step), **ev}
            if step == self.start_step and self.cfg.data.max_prompt_length is not None:
                m["data_dropped_rows"] = self.data_dropped
            self.history.append({"step": step, **m})
            self.sink.log(step, m)
            if c.every and (step + 1) % c.every == 0 and step + 1 < self.cfg.train.steps:
                self.save(step + 1)
        if self.start_step < self.cfg.train.steps:
            self.save(self.cfg.train.steps)
            final = self.evaluate(self.cfg.train.steps)
            if final:
                self.sink.log(self.cfg.train.steps, final)
        return self.history

    def save(self, next_step: int) -> Path:
        # off-policy, the batch prefetched for next_step is not saved: the sampler's position before it is,
        # so a resumed run draws the same prompts and generates them again with the checkpoint's weights
        sampler = self._sampler_state if self._sampler_state is not None else self.sampler.state()
        state = {"step": next_step, "sampler": sampler, "config": self.cfg.to_dict(), "wandb_run_id": self.sink.wandb_run_id}
        return ckpt.save_checkpoint(self.ckpt_root, next_step, lambda d: self.actors.policy.call("save", d), state, self.cfg.checkpoint.keep)

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.shutdown(wait=True, cancel_futures=True)
        self.sink.close()
        self.actors.shutdown()
        self.rewards.close()

    def __enter__(self) -> GRPOTrainer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
