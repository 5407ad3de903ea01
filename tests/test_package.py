import ast

import pytest

import loadrepro


def test_public_names_are_sorted_and_importable():
    assert loadrepro.__all__ == sorted(loadrepro.__all__)
    for name in loadrepro.__all__:
        assert getattr(loadrepro, name) is not None


def test_the_command_line_and_the_api_import_no_statistics_library_until_a_comparison_needs_it():
    """scipy.stats costs about a second to import: a plain run, every shrink trial and every trial must not pay it."""
    import subprocess
    import sys

    code = "import sys, loadrepro.cli.commands, loadrepro.api; print(sorted({m.split('.')[0] for m in sys.modules} & " \
           "{'scipy', 'matplotlib'}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize("user_value", [None, "3"])
def test_a_load_command_imports_numpy_on_one_blas_thread_and_leaves_the_environment_as_it_was(user_value):
    """OpenBLAS starts a thread per core as numpy loads; the load commands load it with one (no thread added), and
    the environment an engine would inherit is the user's: unset stays unset, a value set stays that value."""
    import os
    import subprocess
    import sys

    code = ("import os, sys\n"
            "threads = lambda: len(os.listdir('/proc/self/task'))\n"
            "from loadrepro.cli.load_commands import _numpy_with_one_blas_thread\n"
            "before, early = threads(), 'numpy' in sys.modules\n"
            "_numpy_with_one_blas_thread()\n"
            "print(early, 'numpy' in sys.modules, threads() - before, os.environ.get('OPENBLAS_NUM_THREADS'))\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if user_value is not None:
        env["OPENBLAS_NUM_THREADS"] = user_value
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    early, loaded, added, left = done.stdout.split()
    assert early == "False" and left == str(user_value)
    if user_value is None:
        assert loaded == "True" and added == "0"


@pytest.mark.parametrize("checkpoint_s", [None, 30])
def test_a_run_imports_its_judge_and_report_writers_after_its_first_request_unless_it_checkpoints(checkpoint_s):
    """What a run's reports need is imported once its load is over, so that its first request does not wait on it;
    a run that writes checkpoints imports it before its load, so that no checkpoint imports it mid-load."""
    import subprocess
    import sys

    later = ["loadrepro.report.write", "loadrepro.runs.reporting", "loadrepro.schema.run_report",
             "loadrepro.judge.judgement", "loadrepro.compare.comparison", "loadrepro.judge.answers"]
    overrides = ["workload.conversations=2", "workload.turns=1", "sim.policy='patched'"]
    if checkpoint_s:
        overrides.append(f"load.checkpoint_s={checkpoint_s}")
    code = ("import sys, tempfile\n"
            "import loadrepro, loadrepro.load.client as c\n"
            "send, seen = c.Client.send, []\n"
            "async def first(self, *a, **k):\n"
            f"    seen.append(seen or [m for m in {later!r} if m in sys.modules])\n"
            "    return await send(self, *a, **k)\n"
            "c.Client.send = first\n"
            f"report = loadrepro.run('quickstart', overrides={overrides!r}, out=tempfile.mkdtemp())\n"
            "print(report.passed, seen[0])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    passed, imported = done.stdout.strip().split(" ", 1)
    assert passed == "True"
    reporting = {"loadrepro.report.write", "loadrepro.runs.reporting", "loadrepro.schema.run_report",
                 "loadrepro.judge.judgement"}
    assert reporting <= set(ast.literal_eval(imported)) if checkpoint_s else imported == "[]", imported
