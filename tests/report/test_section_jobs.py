"""Every kind of job of every section: a declared result schema that its result matches, records
that a wrong type in the result is refused by, and results that do not depend on the process
layout or the order the jobs ran in.

The jobs are the sections' own (their functions and configs, one or two of each kind, quick and
full profiles) shrunk to toy sizes (tests/experiments/tinyjobs.py).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "experiments"))
from tinyjobs import tiny_jobs  # noqa: E402

from posenc.report.executors import LocalExecutor, Task  # noqa: E402
from posenc.report.registry import SECTIONS  # noqa: E402
from posenc.report.schema import check, check_spec  # noqa: E402
from posenc.report.store import JobStore, _clean  # noqa: E402

#: fields of a result that measure time (or the machine's load), not the computation
TIMING = {"seconds", "cpu_s", "cpu_seconds", "setup_seconds", "load_before", "load_after", "cpu_count", "threads"}


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


@pytest.fixture(scope="module")
def tiny():
    """``{section: [(job, result)]}``: one tiny job of every kind, run once in this process."""
    return {name: [(job, _clean(job.run(job.config))) for job in tiny_jobs(name, per_kind=1)] for name in SECTIONS}


def test_every_kind_of_job_declares_a_schema_its_result_matches(tiny):
    kinds = set()
    for name, pairs in tiny.items():
        assert pairs, name
        for job, result in pairs:
            kinds.add((job.run.__module__, job.run.__name__))
            assert job.schema is not None, f"{name}: {job.run.__name__} has no result_schema"
            check_spec(job.schema)
            assert check(result, job.schema) is None, (name, job.key, check(result, job.schema))
    assert len(kinds) >= 15  # every section, both profiles: 17 kinds when this was written


def _leaves(value, spec, path=()):
    """Paths of the values that ``spec`` types exactly (no ``object``, no union with null)."""
    if spec in (float, int, bool, str):
        yield path, spec
    elif isinstance(spec, list) and isinstance(value, list):
        for i, item in enumerate(value[:3]):
            yield from _leaves(item, spec[0], (*path, i))
    elif isinstance(spec, dict) and isinstance(value, dict):
        if set(spec) == {str}:
            for k in list(value)[:3]:
                yield from _leaves(value[k], spec[str], (*path, k))
        else:
            for k, sub in spec.items():
                name = k.rstrip("?")
                if name in value:
                    yield from _leaves(value[name], sub, (*path, name))
    elif isinstance(spec, tuple) and None in spec and value is not None:
        for option in spec:
            if option is not None and check(value, option) is None:
                yield from _leaves(value, option, path)
                break


def _set(value, path, new):
    if not path:
        return new
    out = dict(value) if isinstance(value, dict) else list(value)
    out[path[0]] = _set(value[path[0]], path[1:], new)
    return out


WRONG = {float: ["0.5", True, [1.0], {"v": 1}], int: [1.5, "3", False, None], bool: [1, "true", None],
         str: [3, None, ["a"], True]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_wrong_type_anywhere_the_summary_reads_is_refused(tiny, data):
    pairs = [p for ps in tiny.values() for p in ps]
    job, result = data.draw(st.sampled_from(pairs))
    leaves = list(_leaves(result, job.schema))
    assert leaves, job.key
    path, kind = data.draw(st.sampled_from(leaves))
    bad = data.draw(st.sampled_from(WRONG[kind]))
    problem = check(_set(result, path, bad), job.schema)
    assert problem is not None and "result" in problem, (job.key, path, bad)


def test_a_rechecksummed_record_of_the_wrong_type_is_recomputed_with_a_warning(tiny, tmp_path):
    from posenc.report.provenance import code_signature

    job, result = tiny["relative"][0]
    store = JobStore(tmp_path)
    code = code_signature(job.run, "n")
    store.save("relative", job.key, job.config_dict(), {**result, "accuracy": [0.5, 0.5]}, 1.0, code)
    record, why = store.lookup("relative", job.key, job.config_dict(), code, job.schema)
    assert record is None and "result['accuracy'] is not an object" in why
    store.save("relative", job.key, job.config_dict(), result, 1.0, code)
    assert store.lookup("relative", job.key, job.config_dict(), code, job.schema)[0]["result"] == result


INLINE = r"""
import json, random, sys
from posenc.report.provenance import pin_numerics
pin_numerics()  # what `posenc reproduce --workers 1` does before it computes anything
sys.path.insert(0, sys.argv[1])
from tinyjobs import tiny_jobs
from posenc.report.executors import execute
jobs = [j for name in json.loads(sys.argv[2]) for j in tiny_jobs(name, per_kind=1) if not j.alone]
random.Random(7).shuffle(jobs)
out = {}
for j in jobs:
    result, _, numerics = execute(j.run, j.config, 2)
    out[j.key] = [result, numerics]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_records_do_not_depend_on_the_process_layout_threads_or_order():
    sections = list(SECTIONS)
    jobs = [j for name in sections for j in tiny_jobs(name, per_kind=1) if not j.alone]
    keys = [j.key for j in jobs]
    assert len(set(keys)) == len(keys)
    runs = []
    for workers, threads, order in ((1, 1, jobs), (2, 1, jobs[::-1])):
        ex = LocalExecutor(workers, threads)
        try:
            for j in order:
                ex.submit(Task(j.key, j.run, j.config, threads))
            got = {}
            while len(got) < len(order):
                for o in ex.wait(timeout=60):
                    assert o.error is None, (o.key, o.error)
                    got[o.key] = [o.result, o.numerics]
        finally:
            ex.close()
        runs.append(got)
    out = subprocess.run([sys.executable, "-c", INLINE, str(HERE.parent / "experiments"), json.dumps(sections)],
                         capture_output=True, text=True, timeout=600, check=True)
    runs.append(json.loads(out.stdout))
    labels = {numerics for run in runs for _, numerics in run.values()}
    assert len(labels) == 1, labels  # every layout ran on the pinned paths
    first = {k: _strip(v[0]) for k, v in runs[0].items()}
    for other in runs[1:]:
        assert set(other) == set(first)
        for k in keys:
            assert _strip(other[k][0]) == first[k], k  # bit-identical (timing aside)
