"""app.py's command line and the README's quick start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_help_answers_without_importing_keras_tensorflow_or_gradio():
    code = ("import runpy, sys\nsys.argv = ['app.py', '--help']\n"
            "try:\n    runpy.run_path('app.py', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in ('keras', 'tensorflow', 'gradio', 'jax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "--host" in out.stdout and "--port" in out.stdout and "--no-mcp" in out.stdout, out.stderr
    assert "HEAVY []" in out.stdout, out.stdout


def test_the_options_parse_before_anything_is_built():
    # app.py's parser alone (importing app.py would build the app)
    namespace: dict = {"__name__": "app_cli"}
    exec(compile((ROOT / "app.py").read_text().split("def build(")[0], "app.py", "exec"), namespace)
    args = namespace["parse_args"](["--host", "0.0.0.0", "--port", "7861", "--no-mcp"])
    assert (args.host, args.port, args.no_mcp) == ("0.0.0.0", 7861, True)
    assert namespace["parse_args"]([]).host is None


def test_the_readmes_first_20_lines_install_run_and_check():
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:20])
    for needed in ("pip install -r requirements.txt", "python app.py", "--host", "--port", "--no-mcp",
                   "gradio_client"):
        assert needed in head, needed
