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
