"""``code_tests``: run generated Python or C++ against test cases, confined, and judge it outside the program.

``language`` (``"python"``): ``"cpp"``, or ``"auto"`` (the language of the
response's last fenced block).  The program is the last fenced code block of
that language (```` ```python ```` / ```` ```cpp ```` or a bare ```` ``` ````),
or the whole response when it has none.  It never runs in the worker: see
``_sandbox`` for the boundary and the limits.

``ground_truth`` (or a JSON string of it) holds the tests, in either form:

* ``{"inputs": [str, ...], "outputs": [str, ...]}``: stdin/stdout pairs
  (APPS/TACO style); one run per pair (C++: compiled once per task, in the
  sandbox, with ``g++ -std=c++17 -O2``); a case passes when the run exits 0 and
  its output equals the expected one, line by line, trailing whitespace
  ignored, compared in the worker;
* ``{"asserts": [str, ...]}`` or a plain list of strings (Python only): assert
  snippets (MBPP style).  Each is split (``_asserts``): the calls into the
  program are evaluated in the sandbox after the program, in one run, and come
  back as plain values; the assert itself is evaluated in the worker with
  those values.  The expected values never reach the program, and none of its
  objects is compared.  A program that exits early passes nothing; an assert
  that cannot be split safely fails (``first_failure`` says why).

Score: ``passed / total`` (``all_or_nothing=True``: 1.0 only when all pass).
Limits per run: ``timeout_s`` wall, ``cpu_s`` CPU, ``memory_mb`` address space;
``max_total_s`` (45) bounds the whole task (cases left when it runs out fail):
keep it below the pool's hard limit (``task_timeout_s``, 60 by default), so
the reward returns a score rather than being killed.  ``extra``: ``passed``, ``total``,
``code_found`` and ``first_failure``.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from typing import Any

from ..registry.registry import reward
from . import _payload
from ._asserts import PlainValueError, Refused, Split, decode, split_assert
from ._sandbox import Limits, run_exec, run_python, sandbox_dir

__all__ = ["code_tests", "extract_code", "load_tests"]

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_CPP_FENCE = re.compile(r"```[ \t]*(?:cpp|c\+\+|cxx|cc)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_ANY_FENCE = re.compile(r"```[ \t]*([\w+]*)[ \t]*\n.*?```", re.DOTALL)
_PY_TAGS = {"python", "python3", "py"}
_CPP_TAGS = {"cpp", "c++", "cxx", "cc"}
_CXX_FLAGS = ("-std=c++17", "-O2", "-pipe")

def extract_code(response: str, language: str = "python") -> tuple[str, bool]:
    """The last fenced code block of ``language`` (or a bare one), or the whole response; and whether a block was found."""
    blocks = (_FENCE if language == "python" else _CPP_FENCE).findall(response)
    return (blocks[-1], True) if blocks else (response, False)


def _language(response: str, language: str) -> str:
    if language not in ("python", "cpp", "auto"):
        raise ValueError(f"code_tests: language must be 'python', 'cpp' or 'auto', got {language!r}")
    if language != "auto":
        return language
    tags = [t.lower() for t in _ANY_FENCE.findall(response)]
    known = [t for t in tags if t in _PY_TAGS or t in _CPP_TAGS]
    return "cpp" if known and known[-1] in _CPP_TAGS else "python"


def load_tests(gt: Any) -> tuple[str, list]:
    """``("io", [(input, output), ...])`` or ``("asserts", [snippet, ...])``."""
    if isinstance(gt, str):
        try:
            gt = json.loads(gt)
        except json.JSONDecodeError:
            raise ValueError("code_tests: ground_truth is a string but not JSON") from None
    if isinstance(gt, list):
        gt = {"asserts": gt}
    if not isinstance(gt, dict):
        raise ValueError(f"code_tests: ground_truth must be an object or a list, got {type(gt).__name__}")
    if "asserts" in gt:
        asserts = gt["asserts"]
        if not isinstance(asserts, list) or not asserts or not all(isinstance(a, str) for a in asserts):
            raise ValueError("code_tests: 'asserts' must be a non-empty list of strings")
        return "asserts", asserts
    inputs, outputs = gt.get("inputs"), gt.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        raise ValueError("code_tests: ground_truth needs 'asserts', or 'inputs' and 'outputs' lists of the same non-zero length")
    return "io", [(str(i), str(o)) for i, o in zip(inputs, outputs, strict=True)]


def _same_output(got: str, want: str) -> bool:
    lines = lambda s: [line.rstrip() for line in s.rstrip().splitlines()]  # noqa: E731
    return lines(got) == lines(want)


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _run_io(workdir: str, cases: list, limits: Limits, deadline: float, binary: str | None = None) -> tuple[int, str | None]:
    passed, first = 0, None
    for n, (stdin, want) in enumerate(cases):
        left = deadline - time.monotonic()
        if left <= 0:
            return passed, first or f"case {n}: out of time (max_total_s)"
        if binary is None:
            run = run_python(workdir, stdin=stdin, limits=_with_wall(limits, left))
        else:
            run = run_exec(workdir, [binary], stdin=stdin, limits=_with_wall(limits, left))
        if run.failure is None and _same_output(run.stdout, want):
            passed += 1
        elif first is None:
            first = f"case {n}: {run.failure or 'wrong output ' + repr(run.stdout[:100])}"
    return passed, first


def _probe_results(data: bytes) -> tuple[bool, dict[int, tuple[bool, Any]]]:
    """Parse the child's result lines: whether the program loaded, and per probe (ok, value or error)."""
    loaded, out = False, {}
    for line in data.split(b"\n"):
        if not line:
            continue
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if msg == ["loaded"]:
            loaded = True
        elif type(msg) is list and len(msg) == 3 and type(msg[1]) is int and msg[1] not in out:
            if msg[0] == "value":
                try:
                    out[msg[1]] = (True, decode(msg[2]))
                except (PlainValueError, RecursionError) as e:
                    out[msg[1]] = (False, f"PlainValueError: {e}")
            elif msg[0] == "raised" and type(msg[2]) is str:
                out[msg[1]] = (False, msg[2][:300])
    return loaded, out


def _run_asserts(workdir: str, asserts: list, limits: Limits, deadline: float) -> tuple[int, str | None]:
    splits = [split_assert(a) for a in asserts]
    probes: list[str] = []
    first_probe: list[int] = []
    for sp in splits:
        first_probe.append(len(probes))
        if isinstance(sp, Split):
            probes.extend(sp.probes)
    left = max(0.0, deadline - time.monotonic())
    run = run_python(workdir, limits=_with_wall(limits, left), probes=probes)
    loaded, values = _probe_results(run.results)
    passed, first = 0, None
    program_error = next((ln for ln in run.stderr.strip().splitlines() if ln.startswith("program: ")), None)
    for n, sp in enumerate(splits):
        if isinstance(sp, Refused):
            why = f"assert {n}: {sp.reason}"
        elif not loaded or run.failure is not None:
            # a run that did not end cleanly passes nothing: values on its result pipe could be the program's own
            # writes, followed by a crash, a timeout or a broken limit
            why = program_error or run.failure or "the program did not finish"
        else:
            got = [values.get(first_probe[n] + k) for k in range(len(sp.probes))]
            missing = next((i for i, v in enumerate(got) if v is None), None)
            failed = next((v[1] for v in got if v is not None and not v[0]), None)
            if missing is not None:
                why = run.failure or "no result recorded"
            elif failed is not None:
                why = f"assert {n}: {failed}"
            else:
                try:
                    ok = sp.verdict([v[1] for v in got if v is not None])
                except Exception as e:  # noqa: BLE001 - the assert's own comparison raised (TypeError, ...)
                    ok, why = False, f"assert {n}: {type(e).__name__}: {e}"
                else:
                    why = f"assert {n}: AssertionError"
                if ok:
                    passed += 1
                    continue
        first = first or why
    return passed, first[:300] if first else None


def _compile_cpp(workdir: str, limits: Limits, deadline: float) -> tuple[str | None, str | None]:
    """Compile ``solution.cpp`` confined; the binary's path, or None and why it failed."""
    gxx = shutil.which("g++")
    if gxx is None:
        raise ValueError("code_tests: language 'cpp' needs g++ on the worker's PATH (e.g. apt-get install g++)")
    binary = os.path.join(workdir, "solution")
    left = max(0.0, deadline - time.monotonic())
    build = Limits(wall_s=min(max(limits.wall_s, 30.0), left), cpu_s=max(limits.cpu_s, 30), memory_mb=max(limits.memory_mb, 2048),
                   output_bytes=limits.output_bytes, max_procs=limits.max_procs, open_files=256)
    run = run_exec(workdir, [os.path.realpath(gxx), *_CXX_FLAGS, "-o", binary, "solution.cpp"], limits=build,
                   compile_step=True, env={"PATH": "/usr/bin:/bin", "TMPDIR": workdir, "LANG": "C"})
    if run.failure is None and os.path.exists(binary):
        return binary, None
    errors = [ln for ln in run.stderr.splitlines() if "error" in ln]
    return None, f"compile: {(errors[:1] or [run.failure or 'no binary'])[0][:280]}"


def _with_wall(limits: Limits, left: float) -> Limits:
    return Limits(**{**{f: getattr(limits, f) for f in Limits.__slots__}, "wall_s": min(limits.wall_s, left)})


@reward("code_tests")
def code_tests(
    payload: dict,
    timeout_s: float = 5.0,
    cpu_s: int = 5,
    memory_mb: int = 1024,
    max_total_s: float = 45.0,
    all_or_nothing: bool = False,
    language: str = "python",
) -> dict:
    response = _payload.response(payload, "code_tests")
    kind, tests = load_tests(_payload.ground_truth(payload, "code_tests"))
    lang = _language(response, language)
    if lang == "cpp" and kind != "io":
        raise ValueError("code_tests: C++ programs are judged by stdin/stdout tests ('inputs' and 'outputs') only")
    code, found = extract_code(response, lang)
    limits = Limits(wall_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb)
    deadline = time.monotonic() + max_total_s
    with sandbox_dir() as workdir:
        if lang == "cpp":
            _write(os.path.join(workdir, "solution.cpp"), code)
            binary, first = _compile_cpp(workdir, limits, deadline)
            passed = 0
            if binary is not None:
                passed, first = _run_io(workdir, tests, limits, deadline, binary)
        else:
            _write(os.path.join(workdir, "solution.py"), code)
            run = _run_io if kind == "io" else _run_asserts
            passed, first = run(workdir, tests, limits, deadline)
    total = len(tests)
    score = float(passed == total) if all_or_nothing else passed / total
    return {"score": score, "passed": passed, "total": total, "code_found": found, "first_failure": first}
