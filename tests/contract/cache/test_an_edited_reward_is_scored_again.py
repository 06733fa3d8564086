"""Cached scores follow the code the workers run, not the producer's copy of it.

Each test lays out a project as a user does: reward code in the project
directory (the current directory, which worker processes have on their path),
and the trainer's script (or the ``qworker`` command) elsewhere, so the
producer imports another copy of the reward's module, or none at all.  The
user edits the reward between two runs that share a cache file; the second
run must score the edited code.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROWS = [{"text": "x" * i + ("42" if i % 2 == 0 else ""), "answer": "42"} for i in range(6)]  # 3 contain it

CONTAINS = '''
from qworker import reward

@reward("contains_answer")
def contains_answer(payload):
    return {score} if payload["answer"] in payload["text"] else 0.0
'''

EMBEDDED = '''
import json, sys
from qworker import Producer
modules, db, name = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
rows = json.loads(sys.argv[4])
with Producer(local_workers=1, reward_modules=modules, cache_path=db) as p:
    first = p.map(name, rows, timeout=60)
    again = p.map(name, rows, timeout=60)  # the same producer, once a worker has told it the reward's version
print(json.dumps({"first": [[r.score, r.cached, r.error] for r in first], "again": [[r.score, r.cached, r.error] for r in again]}))
'''

CLI = '''
import sys
from qworker.cli.main import main
sys.exit(main())
'''  # what the installed 'qworker' command runs: its own directory, not the current one, is on sys.path


def _layout(tmp: Path) -> tuple[Path, Path]:
    project, scripts = tmp / "project", tmp / "scripts"
    project.mkdir()
    scripts.mkdir()
    (scripts / "train.py").write_text(EMBEDDED)
    (scripts / "qworker_cli.py").write_text(CLI)
    return project, scripts


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _embedded(project: Path, scripts: Path, modules: list[str], name: str = "contains_answer",
              rows: list = ROWS) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, str(scripts / "train.py"), json.dumps(modules), str(project / "cache.sqlite"), name, json.dumps(rows)],
        cwd=project, capture_output=True, text=True, timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _scores(run: dict, which: str = "first") -> list[float]:
    assert all(error is None for _, _, error in run[which]), run
    return [score for score, _, _ in run[which]]


def _cached(run: dict, which: str = "first") -> list[bool]:
    return [cached for _, cached, _ in run[which]]


def test_an_edited_reward_given_by_dotted_path_is_scored_again_by_the_cli(tmp_path):
    project, scripts = _layout(tmp_path)
    _write(project / "myrewards" / "__init__.py", "")
    (project / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))

    def score(out: str) -> list[dict]:
        done = subprocess.run(
            [sys.executable, str(scripts / "qworker_cli.py"), "score", "rows.jsonl", "--reward", "contains_answer",
             "--reward-modules", "myrewards.contains", "--cache", "c.sqlite", "--out", out, "--workers", "1"],
            cwd=project, capture_output=True, text=True, timeout=180,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("cannot import reward module 'myrewards.contains'") == 1, done.stderr  # warned once
        return [json.loads(line) for line in (project / out).read_text().splitlines()]

    _write(project / "myrewards" / "contains.py", CONTAINS.format(score="1.0"))
    first = score("v1.jsonl")
    assert [r["score"] for r in first] == [1.0, 0.0] * 3 and not any(r["cached"] for r in first)
    again = score("v1b.jsonl")  # unchanged: served from the cache
    assert [r["score"] for r in again] == [1.0, 0.0] * 3 and all(r["cached"] for r in again)
    _write(project / "myrewards" / "contains.py", CONTAINS.format(score="0.5"))  # the user edits the reward
    edited = score("v2.jsonl")
    assert [r["score"] for r in edited] == [0.5, 0.0] * 3 and not any(r["cached"] for r in edited)


def test_an_edited_reward_given_by_dotted_path_is_scored_again_by_a_producer_that_cannot_import_it(tmp_path):
    project, scripts = _layout(tmp_path)
    _write(project / "myrewards" / "__init__.py", "")
    _write(project / "myrewards" / "contains.py", CONTAINS.format(score="1.0"))
    first, log = _embedded(project, scripts, ["myrewards.contains"])
    assert _scores(first) == [1.0, 0.0] * 3 and not any(_cached(first))
    assert all(_cached(first, "again")), "once a worker reported the reward's version, its scores are served from the cache"
    assert log.count("cannot import reward module 'myrewards.contains'") == 1  # warned once
    assert log.count("is not known in this process") == 1
    second, _ = _embedded(project, scripts, ["myrewards.contains"])  # unchanged, a new process: from the cache
    assert _scores(second) == [1.0, 0.0] * 3 and all(_cached(second))
    _write(project / "myrewards" / "contains.py", CONTAINS.format(score="0.5"))
    edited, _ = _embedded(project, scripts, ["myrewards.contains"])
    assert _scores(edited) == [0.5, 0.0] * 3 and not any(_cached(edited))


def test_an_edited_reward_given_by_py_path_is_scored_again(tmp_path):
    # the file imports a helper next to it: the workers (in the project directory) import it; the producer cannot
    project, scripts = _layout(tmp_path)
    _write(project / "reward_helpers.py", "def found(text, answer):\n    return answer in text\n")
    reward_file = '''
    from qworker import reward
    from reward_helpers import found

    @reward("contains_answer")
    def contains_answer(payload):
        return {score} if found(payload["text"], payload["answer"]) else 0.0
    '''
    _write(project / "contains_file.py", reward_file.format(score="1.0"))
    first, _ = _embedded(project, scripts, ["contains_file.py"])
    assert _scores(first) == [1.0, 0.0] * 3
    _write(project / "contains_file.py", reward_file.format(score="0.25"))
    edited, _ = _embedded(project, scripts, ["contains_file.py"])
    assert _scores(edited) == [0.25, 0.0] * 3 and not any(_cached(edited))


def test_an_edited_reward_in_a_package_is_scored_again_when_the_producer_imports_another_copy(tmp_path):
    # a stale copy of the package sits next to the trainer's script: the producer imports that one
    project, scripts = _layout(tmp_path)
    for where in (project, scripts):
        _write(where / "myrewards" / "__init__.py", "from . import contains  # noqa: F401\n")
        _write(where / "myrewards" / "contains.py", CONTAINS.format(score="1.0"))
    first, _ = _embedded(project, scripts, ["myrewards"])
    assert _scores(first) == [1.0, 0.0] * 3
    _write(project / "myrewards" / "contains.py", CONTAINS.format(score="0.75"))  # the copy the workers import
    edited, log = _embedded(project, scripts, ["myrewards"])
    assert _scores(edited) == [0.75, 0.0] * 3 and not any(_cached(edited))
    assert all(_cached(edited, "again"))
    assert log.count("the producer's copy of reward 'contains_answer' is not the code its workers run") == 1


def test_an_edited_module_function_reward_the_producer_cannot_import_is_scored_again(tmp_path):
    # a module:function name is loaded by a worker on first use: its version is learnt from the first results
    project, scripts = _layout(tmp_path)
    plain = ("def contains(payload):\n    with open('calls.log', 'a') as f:\n        f.write('x\\n')\n"
             "    return {score} if payload['answer'] in payload['text'] else 0.0\n")
    _write(project / "plainrewards.py", plain.format(score="1.0"))
    twice, _ = _embedded(project, scripts, [], "plainrewards:contains", ROWS + ROWS)  # duplicates share one task
    assert _scores(twice) == [1.0, 0.0] * 6 and not any(_cached(twice)) and all(_cached(twice, "again"))
    assert len((project / "calls.log").read_text().splitlines()) == len(ROWS)
    first, _ = _embedded(project, scripts, [], "plainrewards:contains")  # a new producer: not looked up until reported
    assert _scores(first) == [1.0, 0.0] * 3 and not any(_cached(first))
    assert all(_cached(first, "again"))
    _write(project / "plainrewards.py", plain.format(score="0.5"))
    edited, _ = _embedded(project, scripts, [], "plainrewards:contains")
    assert _scores(edited) == [0.5, 0.0] * 3 and not any(_cached(edited))


def test_a_reward_without_a_fingerprint_where_it_runs_is_never_cached(tmp_path):
    # a builtin has no Python code and no source file: nothing would tell an edit apart, so nothing is cached
    project, scripts = _layout(tmp_path)
    _write(project / "lenreward.py", "from qworker import reward\n\nreward('text_length')(len)\n")
    (scripts / "train.py").write_text(EMBEDDED.replace("rows = json.loads(sys.argv[4])", "rows = [[1, 2], [3]]"))
    first, log = _embedded(project, scripts, ["lenreward"], "text_length")
    assert _scores(first) == [2.0, 1.0] and _scores(first, "again") == [2.0, 1.0]
    assert not any(_cached(first) + _cached(first, "again"))
    assert log.count("reward 'text_length' has no code fingerprint where it runs") == 1
    second, _ = _embedded(project, scripts, ["lenreward"], "text_length")
    assert not any(_cached(second))


REMOTE = '''
import json, os, signal, subprocess, sys
from qworker import Producer
modules, db, name, rows = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
with Producer(bind="tcp://127.0.0.1:0", local_workers=0, reward_modules=modules, cache_path=db) as p:
    pool = subprocess.Popen([sys.executable, "-m", "qworker", "pool", "--connect", p.endpoint, "--workers", "1",
                             "--reward-modules", *modules], stdin=subprocess.DEVNULL)
    try:
        p.wait_for_workers(1, timeout=60)
        first = p.map(name, rows, timeout=60)
        again = p.map(name, rows, timeout=60)
    finally:
        pool.send_signal(signal.SIGTERM)
        pool.wait(timeout=60)
print(json.dumps({"first": [[r.score, r.cached, r.error] for r in first], "again": [[r.score, r.cached, r.error] for r in again]}))
'''


def test_an_edited_reward_is_scored_again_by_a_remote_pool(tmp_path):
    # a qworker-pool started in the project directory runs the reward; the producer (elsewhere) cannot import it
    project, scripts = _layout(tmp_path)
    (scripts / "train.py").write_text(REMOTE)
    _write(project / "myrewards" / "__init__.py", "")
    _write(project / "myrewards" / "contains.py", CONTAINS.format(score="1.0"))
    first, _ = _embedded(project, scripts, ["myrewards.contains"])
    assert _scores(first) == [1.0, 0.0] * 3 and all(_cached(first, "again"))
    second, _ = _embedded(project, scripts, ["myrewards.contains"])
    assert _scores(second) == [1.0, 0.0] * 3 and all(_cached(second))  # the pool said READY with its version first
    _write(project / "myrewards" / "contains.py", CONTAINS.format(score="0.5"))
    edited, _ = _embedded(project, scripts, ["myrewards.contains"])
    assert _scores(edited) == [0.5, 0.0] * 3 and not any(_cached(edited))


def test_rows_an_older_qworker_cached_under_the_producers_copy_are_not_served(tmp_path):
    # an older qworker keyed rows by the producer's copy of the code, whatever code the workers ran: such a row may
    # hold the score of other code, so none is served, even when the code now matches the producer's copy
    from hashlib import blake2b

    from qworker import Producer
    from qworker.cache.hashing import encode_payload, key_prefix, params_fingerprint
    from qworker.registry.fingerprint import code_fingerprint

    module = tmp_path / "old_rows_reward.py"
    _write(module, CONTAINS.replace("contains_answer", "t_fpw_old_rows").format(score="1.0"))
    payload = {"text": "42", "answer": "42"}
    with Producer(local_workers=1, reward_modules=[str(module)], cache_path=str(tmp_path / "c.sqlite")) as p:
        fn = p.catalog.book.spec("t_fpw_old_rows").fn
        fp = code_fingerprint(fn)
        assert fp is not None
        old = blake2b(key_prefix("t_fpw_old_rows", params_fingerprint({}), "\0code " + fp) + encode_payload(payload),
                      digest_size=16).digest()
        assert p.cache.disk is not None
        p.cache.disk.put_many([(old, 0.125, {}, "t_fpw_old_rows")])  # what workers running other code once returned
        assert p.cache.disk.flush()
        [r] = p.map("t_fpw_old_rows", [payload], timeout=60)
    assert r.ok and (r.score, r.cached) == (1.0, False)


def test_an_edited_reward_is_scored_again_through_a_reward_service(tmp_path):
    # 'qworker serve' hashes its clients' tasks: started as the installed command, it cannot import the project's module
    import signal
    import socket
    import threading

    from qworker import Client

    project, scripts = _layout(tmp_path)
    _write(project / "myrewards" / "__init__.py", "")

    def scores() -> tuple[list[float], list[bool]]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, str(scripts / "qworker_cli.py"), "serve", "--listen", f"tcp://127.0.0.1:{port}", "--workers", "1",
             "--reward-modules", "myrewards.contains", "--cache", "c.sqlite"],
            cwd=project, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            assert proc.stderr is not None
            line = proc.stderr.readline()
            while "clients on" not in line:
                assert proc.poll() is None and line, f"qworker serve did not start: {line}{proc.stderr.read()}"
                line = proc.stderr.readline()
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            with Client(f"tcp://127.0.0.1:{port}") as c:
                results = c.map("contains_answer", ROWS, timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        assert all(r.ok for r in results), [r.error for r in results]
        return [r.score for r in results], [r.cached for r in results]

    _write(project / "myrewards" / "contains.py", CONTAINS.format(score="1.0"))
    assert scores() == ([1.0, 0.0] * 3, [False] * 6)
    assert scores() == ([1.0, 0.0] * 3, [True] * 6)
    _write(project / "myrewards" / "contains.py", CONTAINS.format(score="0.5"))
    assert scores() == ([0.5, 0.0] * 3, [False] * 6)
