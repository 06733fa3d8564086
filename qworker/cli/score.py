"""``qworker score``: score a JSONL file, writing each result as it comes.

Contract:

* Arguments are checked before any scoring: the input is read and parsed, the
  ``--params`` JSON must be an object, ``--out`` must be writable, the config
  must load, and the reward must resolve (an unknown name is an error unless
  remote pools may join with ``--bind``; params the reward does not take are
  an error), a reward module must import (unless ``--bind``), and ``--workers 0``
  needs ``--bind``.  Any of these exits 2 with one line naming the problem.
* With ``--bind`` and no local worker, it says where it waits and waits at
  most ``--pool-timeout`` seconds (300) for a first pool; then exit 1, one line.
* Each finished row is appended to ``--out`` (and flushed) as soon as its
  result arrives, so Ctrl-C, SIGTERM or a crash keep every finished row.  When
  the whole file is scored, ``--out`` is rewritten in input order.
* Ctrl-C (or SIGTERM) stops cleanly: no traceback, the rows finished so far are
  written, a summary is printed, and the exit code is 128 + the signal (130).
  A second Ctrl-C exits at once (every finished row is already on disk).
* A partial ``--out`` is resumed: a row counts as scored when its ``line`` (the
  1-based line number in the input file) holds an input equal to the row's
  ``input``, and it has no error.  Those lines are skipped; failed rows are
  scored again.  Rows scored with another ``--reward`` or ``--params`` are
  refused (exit 2) rather than mixed; ``--overwrite`` starts afresh.
* The result cache persists by default: ``--cache PATH``, else the config's
  ``producer.cache_path``, else ``default_cache_path()``; ``--no-cache`` skips it.
  ``--refresh`` recomputes every task instead of reading the cache (the new
  results are cached); ``--overwrite`` ignores a partial ``--out`` and recomputes.
* ``-`` is stdin for the input and stdout for ``--out`` (rows in the order they
  finish, each with its ``line``; no resume).  An empty input writes an empty
  ``--out``.  A line that is not UTF-8 or JSON stops the run naming it, unless
  ``--skip-bad-lines N`` skips up to N of them.
* Exit codes (``cli.args``): 0 done; 1 when every task failed, or any with
  ``--strict``; 2 refused at start; 130 Ctrl-C.  The summary's mean score is
  over the successful rows, and says how many failed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.machinery
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional, TextIO, Union

from .._exceptions import ConfigError, PoolStartError, QworkerError, RewardError
from ..config import file as _config
from ..config.options import ProducerOptions
from ..engine.producer import Producer
from ..engine.progress import Progress
from ..engine.status import ProducerStatus
from ..registry.catalog import Catalog, Composite, Plain
from ..registry.info import import_here

__all__ = ["check_modules", "default_cache_path", "resolve_reward", "score_main"]


def default_cache_path() -> str:
    """``$XDG_CACHE_HOME/qworker/results.sqlite``, or ``~/.cache/qworker/results.sqlite``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "qworker", "results.sqlite")


class _Stop(Exception):
    """Ctrl-C or SIGTERM while scoring."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stop(signum: int, _frame: object) -> None:
    raise _Stop(signum)


def _exit_now(signum: int, _frame: object) -> None:
    print(f"\nqworker score: {signal.Signals(signum).name} again: exiting now; every finished row is in --out", file=sys.stderr)
    os._exit(128 + signum)


def read_inputs(path: str, skip_bad: int = 0) -> dict[int, Any]:
    """Line number (1-based, blank lines skipped but counted) -> parsed JSON payload; ``-`` reads stdin.

    A line that is not UTF-8 or not JSON is a ``ConfigError`` naming it, unless it is among the first
    ``skip_bad`` such lines: those are skipped, each named on stderr."""
    rows: dict[int, Any] = {}
    bad = 0
    name = "<stdin>" if path == "-" else path
    f = sys.stdin.buffer if path == "-" else open(path, "rb")
    try:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                rows[n] = json.loads(line)
                continue
            except UnicodeDecodeError as exc:
                why = f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
            except json.JSONDecodeError as exc:
                why = f"not valid JSON ({exc.msg})"
            bad += 1
            if bad > skip_bad:
                more = f"more than --skip-bad-lines {skip_bad} bad lines" if skip_bad else "pass --skip-bad-lines N to skip up to N such lines"
                raise ConfigError(f"{name}:{n}: {why}; {more}")
            print(f"qworker score: skipped {name}:{n}: {why}", file=sys.stderr)
    finally:
        if f is not sys.stdin.buffer:
            f.close()
    return rows


def check_writable(path: str) -> None:
    if path == "-":
        return
    if os.path.isdir(path):
        raise ConfigError(f"--out {path} is a directory")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise ConfigError(f"--out {path} is not writable")
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"--out {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ConfigError(f"--out {path}: directory {parent} is not writable")


def scored_rows(path: str, inputs: dict[int, Any], reward: str, params: Optional[dict]) -> dict[int, dict]:
    """The rows of an existing ``--out`` that this run can keep, by line number."""
    done: dict[int, dict] = {}
    if path == "-" or not os.path.exists(path):
        return done
    with open(path, encoding="utf-8") as f:
        for n, text in enumerate(f, 1):
            try:
                row = json.loads(text)
            except json.JSONDecodeError:
                continue  # a line torn by a crash: scored again
            if not isinstance(row, dict) or not isinstance(row.get("line"), int):
                raise ConfigError(f"--out {path}:{n}: not a row of 'qworker score' (no 'line' number); "
                                  "pass --overwrite or another --out")
            if row.get("reward") != reward or row.get("params") != params:
                raise ConfigError(
                    f"--out {path} holds rows scored with --reward {row.get('reward')!r} --params "
                    f"{json.dumps(row.get('params'))} (this run: {reward!r}, {json.dumps(params)}); "
                    "pass --overwrite or another --out"
                )
            line = row["line"]
            if line in inputs and row.get("input") == inputs[line] and row.get("error") is None:
                done[line] = row
    return done


def check_modules(*, config: Optional[str], modules: Optional[list[str]], bind: Optional[str]) -> tuple[dict, tuple[str, ...], Optional[str]]:
    """Load the config and import the reward modules a producer with these settings will load; unless remote
    pools may join (``bind``, or the config's), one that does not import is a ``ConfigError`` (no local worker
    could import it either).  Returns the loaded config, the modules and the bind endpoint."""
    loaded = _config.load(config)
    # the modules the producer will load: --reward-modules replaces the config's reward_modules, as in Producer()
    modules_ = ProducerOptions.from_mapping(loaded["producer"], {"reward_modules": modules or None},
                                            where=loaded["where"] + ": producer").reward_modules
    bind = bind or loaded["producer"].get("bind")
    if bind is None:
        # a module that does not import here but lies under the current directory imports in the local workers,
        # which have that directory first on their sys.path (a `qworker` console script does not)
        errors = [e for m in modules_ for e in import_here([m]) if not _found_by_local_workers(m)]
        if errors:
            raise ConfigError(f"{errors[0]} (check --reward-modules, or the config's producer.reward_modules; "
                              "no local worker could import it)")
    return loaded, modules_, bind


def _found_by_local_workers(module: str) -> bool:
    """Whether a dotted module name's top-level package or module lies in the current directory, which local
    workers have first on their ``sys.path``."""
    if module.endswith(".py") or os.sep in module:
        return False
    return importlib.machinery.PathFinder.find_spec(module.split(".")[0], [os.getcwd()]) is not None


def resolve_reward(*, config: Optional[str], reward: str, modules: Optional[list[str]], bind: Optional[str],
                   params: Optional[dict]) -> tuple[Union[Plain, Composite], dict]:
    """Resolve ``reward`` as a producer with these settings will, before it starts any worker; returns the
    target and the loaded config.  ``ConfigError``/``RewardError`` for: an unknown name (listing the known
    ones), params the reward does not take, and, unless remote pools may join with ``bind``, a reward
    module that does not import here (no local worker could import it either)."""
    loaded, modules_, bind = check_modules(config=config, modules=modules, bind=bind)
    catalog = Catalog(loaded["rewards"], loaded["where"], modules=list(modules_), remote=bind is not None, judges=loaded["judges"])
    target = catalog.resolve(reward, params)
    if not isinstance(target, Composite) and bind is None and catalog.book.spec(target.reward) is None:
        if ":" in target.reward:
            raise RewardError(f"--reward {reward!r}: {target.reward!r} does not import here, so no local worker can run it")
        catalog.book.check_name(target.reward, "--reward")
    return target, loaded


def _cache_path(args: argparse.Namespace, from_config: Optional[str]) -> str:
    if args.no_cache:
        return ""  # explicit and empty: no disk cache, even if the config names one
    return args.cache or from_config or default_cache_path()


def _write(out: TextIO, line: int, row: Any, result: Any, reward: str, params: Optional[dict]) -> dict:
    record = {"line": line, "input": row, **result.to_dict(), "reward": reward, "params": params}
    out.write(json.dumps(record) + "\n")
    out.flush()
    return record


def score_main(args: argparse.Namespace) -> int:
    """Run ``qworker score``; returns the exit code (see the module's contract)."""
    old = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _score(args)
    except _Stop as exc:  # before scoring started: nothing to keep
        print(f"qworker score: interrupted ({exc}) before scoring", file=sys.stderr)
        return 128 + exc.signum
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@dataclass(frozen=True)
class _Job:
    """What ``_start`` settled: the input rows by line, the params, the rows of ``--out`` already scored (by line),
    and the producer, with its workers or a first pool there."""

    inputs: dict[int, Any]
    params: Optional[dict]
    done: dict[int, dict]
    producer: Producer


def _start(args: argparse.Namespace) -> Union[int, _Job]:
    """Every check of the module's contract that can be made before scoring, then the producer and, with ``--bind``
    and no local worker, the wait for a first pool; an exit code (0, 1 or 2 per the module's contract, one line said)
    when it does not score."""
    try:
        inputs = read_inputs(args.input, args.skip_bad_lines)
        params = json.loads(args.params) if args.params else None
        if params is not None and not isinstance(params, dict):
            raise ConfigError("--params must be a JSON object")
        check_writable(args.out)
        done = {} if args.overwrite else scored_rows(args.out, inputs, args.reward, params)
        # where the workers come from is settled before any reward module is imported (which may warn)
        producer_section = _config.load(args.config)["producer"]
        bind = args.bind or producer_section.get("bind")
        workers = args.workers if args.workers is not None else producer_section.get("local_workers")
        if workers is not None and workers < 0:
            raise ConfigError(f"--workers {workers}: expected 0 or more")
        if workers == 0 and bind is None:
            raise ConfigError("--workers 0 starts no local worker, and without --bind ENDPOINT no remote pool can connect: "
                              "nothing would score; give --workers N, or --bind tcp://127.0.0.1:5555 for remote pools")
        _target, loaded = resolve_reward(config=args.config, reward=args.reward, modules=args.rewards, bind=args.bind, params=params)
        cache_path = _cache_path(args, loaded["producer"].get("cache_path"))
        if not inputs:
            if args.out != "-":
                open(args.out, "w").close()
            print(f"qworker score: {args.input} has 0 rows: nothing to score; wrote an empty {args.out}", file=sys.stderr)
            return 0
        if len(done) == len(inputs):
            print(f"qworker score: all {len(inputs)} rows of {args.input} are already scored in {args.out}; "
                  "nothing to do (--overwrite scores them again)", file=sys.stderr)
            return 0  # kept rows are scored rows: failed ones are scored again
        producer = Producer(
            config=args.config, local_workers=args.workers, bind=args.bind, reward_modules=args.rewards or None,
            cache_path=cache_path, task_timeout_s=args.timeout, cache_read=not (args.overwrite or args.refresh),
            curve_secret_key=args.curve_secret_key, curve_allowed_keys=args.curve_allowed_keys, insecure=args.insecure,
        )
    except json.JSONDecodeError as exc:
        print(f"qworker score: --params is not valid JSON: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"qworker score: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except QworkerError as exc:
        print(f"qworker score: {exc}", file=sys.stderr)
        return 2
    if bind is not None and producer._dispatcher.workers_ready == 0:  # remote pools only: they may never come
        try:
            arrived = _wait_for_pool(producer, args.pool_timeout)
        except BaseException:  # Ctrl-C while waiting
            producer.close(timeout=5.0)
            raise
        if not arrived:
            producer.close(timeout=5.0)
            return 1
    return _Job(inputs, params, done, producer)


def _score(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    job = _start(args)
    if isinstance(job, int):
        return job
    inputs, params, done, producer = job.inputs, job.params, job.done, job.producer
    records: dict[int, dict] = dict(done)
    stopped: Optional[_Stop] = None
    futures: list = []
    lines_of: dict[int, list[int]] = {}  # id(future) -> input lines (duplicate payloads share a future)
    try:  # until scoring starts, every way out closes the producer here
        todo = [n for n in inputs if n not in done]
        if done:
            print(f"qworker score: resuming {args.out}: {len(done)} of {len(inputs)} rows already scored", file=sys.stderr)
        out = sys.stdout if args.out == "-" else open(args.out, "a" if done else "w", encoding="utf-8")
    except OSError as exc:
        producer.close(timeout=5.0)
        print(f"qworker score: --out {args.out}: {exc.strerror}", file=sys.stderr)
        return 2
    except BaseException:  # Ctrl-C before scoring
        producer.close(timeout=5.0)
        raise
    started = time.monotonic()
    try:
        progress = Progress(len(todo), enabled=not args.quiet)
        try:
            futures = producer.submit_batch(args.reward, [inputs[n] for n in todo], params=params)
            for f, n in zip(futures, todo, strict=True):
                lines_of.setdefault(id(f), []).append(n)
            for f in concurrent.futures.as_completed(futures):  # type: ignore[assignment]  # they are ResultFutures
                for n in lines_of.pop(id(f)):
                    records[n] = _write(out, n, inputs[n], f.result(), args.reward, params)
                    progress.advance(failed=bool(records[n]["error"]))
        except _Stop as exc:
            stopped = exc
        except (ConfigError, RewardError) as exc:
            print(f"qworker score: {exc}", file=sys.stderr)
            return 2
        finally:  # from here on a second signal exits at once: every finished row is on disk
            signal.signal(signal.SIGINT, _exit_now)
            signal.signal(signal.SIGTERM, _exit_now)
        for f in futures:  # finished while we were stopping: keep them too
            if f.done() and id(f) in lines_of:
                for n in lines_of.pop(id(f)):
                    records[n] = _write(out, n, inputs[n], f.result(), args.reward, params)
        progress.close()
        elapsed = time.monotonic() - started
        counts = producer.status()["producer"]
    finally:
        if out is not sys.stdout:
            out.close()
        producer.close(timeout=5.0 if stopped else 30.0)
    if stopped is None and args.out != "-":  # stdout has its rows in the order they finished (each has its 'line')
        _rewrite_in_order(args.out, records)
    _summary(args, records, done, len(todo), inputs, elapsed, time.monotonic() - t0, counts, stopped)
    if stopped is not None:
        return 128 + stopped.signum
    new = [r for n, r in records.items() if n not in done]
    if new and all(r["error"] for r in new):
        return 1  # every task failed: a run that scored nothing is not a success
    return 1 if args.strict and any(r["error"] for r in records.values()) else 0


def _wait_for_pool(producer: Any, timeout_s: float) -> bool:
    """With ``--bind``: wait (saying so) up to ``timeout_s`` for a first worker, local or remote; False (with one
    line) when none came."""
    print(f"qworker score: waiting up to {timeout_s:g} s (--pool-timeout) for a pool on {producer.endpoint}: "
          f"start one with 'qworker-pool --connect {producer.endpoint}'", file=sys.stderr, flush=True)
    try:
        producer.wait_for_workers(1, timeout=timeout_s)
    except PoolStartError:
        print(f"qworker score: no pool connected to {producer.endpoint} within {timeout_s:g} s (--pool-timeout); "
              "nothing was scored", file=sys.stderr)
        return False
    return True


def _rewrite_in_order(path: str, records: dict[int, dict]) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for n in sorted(records):
            f.write(json.dumps(records[n]) + "\n")
    os.replace(tmp, path)


def _summary(
    args: argparse.Namespace, records: dict[int, dict], done: dict, submitted: int, inputs: dict,
    elapsed: float, total_s: float, counts: ProducerStatus, stopped: Optional[_Stop],
) -> None:
    new = [r for n, r in records.items() if n not in done]
    failed = [r for r in new if r["error"]]
    hits = sum(bool(r["cached"]) for r in new)
    ok = [r["score"] for r in records.values() if not r["error"]]
    n = len(new)
    lines = []
    if stopped is not None:
        lines.append(
            f"interrupted ({stopped}): {n} of {submitted} tasks finished and written; {len(records)} of {len(inputs)} "
            f"rows are in {args.out}. Run the same command again to resume."
        )
    lines.append(
        f"scored {n} tasks with '{args.reward}' in {elapsed:.2f} s ({n / max(elapsed, 1e-9):,.0f} tasks/s; "
        f"{total_s:.2f} s with start-up)" + (f"; {len(done)} rows were already in --out" if done else "")
    )
    lines.append(
        f"  evaluated {counts['resolved']}  duplicates {counts['deduplicated']}  cache hits {hits}  failed {len(failed)}"
        + (f"  mean score {sum(ok) / len(ok):.4f} over the {len(ok)} successful rows" if ok else "  no successful rows: no mean score")
        + f"  -> {args.out}"
    )
    kinds: dict[str, int] = {}
    for r in failed:
        kind = (r["error"] or "?").partition(":")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    if kinds:
        lines.append("  failures: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
        lines.append(f"  first failure: {failed[0]['error']}")
    print("\n".join(lines), file=sys.stderr)
