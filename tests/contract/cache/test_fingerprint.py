"""A reward's code is part of its cache identity unless it declares a version."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from qworker.registry.fingerprint import code_fingerprint

REWARD = '''
from qworker import reward

@reward("t_fp_edited"{version})
def edited(payload):
    return {score}
'''

RUN = '''
import json, sys
from qworker import Producer
path, db = sys.argv[1], sys.argv[2]
with Producer(local_workers=1, reward_modules=[path], cache_path=db) as p:
    [r] = p.map("t_fp_edited", [{"x": 1}], timeout=60)
print(json.dumps({"score": r.score, "cached": r.cached, "error": r.error}))
'''


def test_the_fingerprint_follows_the_code_and_only_the_code():
    def a(payload):
        return 1.0

    def b(payload):
        return 2.0

    def a_again(payload):
        return 1.0

    assert code_fingerprint(a) == code_fingerprint(a) == code_fingerprint(a_again)  # names and lines do not count
    assert code_fingerprint(a) != code_fingerprint(b)


def _score_twice(tmp: Path, version: str) -> tuple[dict, dict]:
    path, db, script = tmp / "edited_reward.py", tmp / "cache.sqlite", tmp / "run.py"
    script.write_text(RUN)
    out = []
    for score in ("1.0", "2.0"):  # the user edits the reward between the two runs
        path.write_text(textwrap.dedent(REWARD.format(version=version, score=score)))
        done = subprocess.run([sys.executable, str(script), str(path), str(db)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        out.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return out[0], out[1]


def test_an_edited_reward_is_scored_again_not_served_from_the_cache(tmp_path):
    first, second = _score_twice(tmp_path, "")
    assert (first["score"], first["cached"]) == (1.0, False)
    assert (second["score"], second["cached"]) == (2.0, False)


def test_a_declared_version_keeps_scores_across_edits(tmp_path):
    first, second = _score_twice(tmp_path, ', version="1"')
    assert (first["score"], second["score"], second["cached"]) == (1.0, 1.0, True)


def test_a_callable_without_python_code_has_no_fingerprint_and_a_partials_arguments_count():
    import functools

    def scaled(payload, k=1.0):
        return k

    assert code_fingerprint(len) is None  # nothing would tell two versions apart: such a reward is not cached
    assert code_fingerprint(functools.partial(scaled, k=1.0)) != code_fingerprint(functools.partial(scaled, k=2.0))


def test_a_fingerprint_is_the_same_in_every_process_whatever_its_hash_seed(tmp_path):
    # workers take fingerprints in processes of their own: a set constant (`x in {...}`) must not print in hash order
    import subprocess
    import sys

    (tmp_path / "setconst.py").write_text("def f(x):\n    return x in {'alpha', 'beta', 'gamma', 'delta', 'epsilon'}\n")
    code = "import setconst; from qworker.registry.fingerprint import code_fingerprint; print(code_fingerprint(setconst.f))"
    prints = {
        subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True,
                       env={**__import__("os").environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(tmp_path)}).stdout
        for seed in (1, 2, 3, 4)
    }
    assert len(prints) == 1, prints


def test_a_partials_fingerprint_follows_its_functions_module(tmp_path, monkeypatch):
    import functools
    import importlib
    import sys

    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "partmod.py").write_text("def f(x, k):\n    return x * k\n\nHELPER = 1\n")
    first = code_fingerprint(functools.partial(importlib.import_module("partmod").f, k=2))
    (tmp_path / "partmod.py").write_text("def f(x, k):\n    return x * k\n\nHELPER = 2\n")  # only the module changes
    sys.modules.pop("partmod")
    assert code_fingerprint(functools.partial(importlib.import_module("partmod").f, k=2)) != first
