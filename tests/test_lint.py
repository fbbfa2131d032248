"""The README's test command is what CI runs, the linter first, and the tree is clean by the project's rules."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import ROOT


def test_ci_runs_the_readme_command_with_the_linter_first():
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"python3 -m venv \.venv && .*python -m pytest", readme).group(0)
    assert "&& ruff check . && python -m pytest" in command
    assert command in (ROOT / ".ci" / "run").read_text()


def test_ruff_is_clean_with_the_project_configuration():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout[-3000:]
