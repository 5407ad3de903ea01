"""The pytest plugin as an engine's test suite meets it: a failing assertion shows the verdict, its reasons and where
the report is; --loadrepro-keep keeps the run directories."""

pytest_plugins = ["pytester"]

FAILING = '''
def test_the_stock_engine_survives(loadrepro_run):
    report = loadrepro_run("quickstart")  # the simulated engine, stock: it dies
    assert report.passed
'''


def test_a_failing_assertion_shows_the_verdict_reasons_and_report(pytester):
    pytester.makepyfile(FAILING)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "<RunReport stock: FAIL (engine died at" in out  # pytest's own "where False = <RunReport ...>.passed"
    section = out.split("- loadrepro -", 1)[1]  # the plugin's own section under the failure
    assert "stock: FAIL" in section and "- engine died at" in section
    assert "loadrepro/01-quickstart/report.md" in section


def test_keep_puts_run_directories_where_asked(pytester, tmp_path):
    pytester.makepyfile(FAILING)
    keep = tmp_path / "kept"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--loadrepro-keep={keep}")
    result.assert_outcomes(failed=1)
    run_dir = keep / "test_the_stock_engine_survives" / "01-quickstart"
    assert (run_dir / "report.md").read_text().startswith("# loadrepro: FAIL - quickstart (stock)")
    assert str(run_dir / "report.md") in result.stdout.str()
