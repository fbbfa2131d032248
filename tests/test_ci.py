"""The README's test command is what CI runs (the linter first, then the whole suite), and docs/development.md
gives the quick loop first, the full suite second. The linter itself runs in .ci/run, not here."""

from __future__ import annotations

import re

from tests.helpers import ROOT

QUICK_LOOP = 'python -m pytest -m "not slow and not e2e" -n 2'


def test_ci_runs_the_readme_command_with_the_linter_first():
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"python3 -m venv \.venv && .*python -m pytest.*$", readme, re.M).group(0)
    # the quick loop on both cores, then the rest ("slow or e2e" is its complement) one test at a time
    assert command.endswith(f'&& ruff check . && {QUICK_LOOP} && python -m pytest -m "slow or e2e"'), command
    assert command in (ROOT / ".ci" / "run").read_text()


def test_the_development_page_gives_the_quick_loop_then_the_full_suite():
    section = (ROOT / "docs" / "development.md").read_text()
    quick = section.index(f"```bash\n{QUICK_LOOP}\n```")
    full = section.index("```bash\npython -m pytest\n```")
    assert quick < full
    # -n comes from pytest-xdist, which the test requirements install
    requirements = (ROOT / "requirements-test.txt").read_text().splitlines()
    assert any(line.startswith("pytest-xdist==") for line in requirements)
