"""explorer.settings: every variable parsed, its default, a bad value refused by name, the object frozen, and
the table in docs/settings.md and the code's reads kept to what Settings holds."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from explorer.core.settings import Settings, SettingsError

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {f.name: f.metadata["env"] for f in dataclasses.fields(Settings)}

# Each field: (the variable's text, the value it gives).
SAMPLES = {
    "checkpoints": ("/srv/checkpoints", "/srv/checkpoints"),
    "data_dir": ("/data/cifar", "/data/cifar"),
    "cifar_url": ("http://mirror.example/cifar/", "http://mirror.example/cifar/"),
    "keras_home": ("/cache/keras", "/cache/keras"),
    "model_a": ("paper/cifar10-vanilla", "paper/cifar10-vanilla"),
    "model_b": ("paper/cifar10-spt_lsa", "paper/cifar10-spt_lsa"),
    "mcp": ("off", False),
    "server_name": ("0.0.0.0", "0.0.0.0"),
    "gradio_mcp_server": ("true", "true"),
    "space_id": ("someone/explorer", "someone/explorer"),
    "hf_hub_offline": ("yes", True),
    "prewarm": ("Compile", "compile"),
    "warm_shapes": ("3x100, 7x2000,", ((3, 100), (7, 2000))),
    "max_epochs": ("5", 5),
    "max_images": ("1000", 1000),
    "max_zip_mb": ("10", 10),
    "max_upload_mb": (" 2 ", 2),
    "max_pixels": ("1000000", 1_000_000),
    "shared": ("1", True),
    "browser_secret": ("s3cret", "s3cret"),
    "max_queue": ("0", 0),
    "max_runs": ("2", 2),
    "max_run_mb": ("0.5", 0.5),
    "run_ttl_hours": ("1.5", 1.5),
    "max_hub_mb": ("12.5", 12.5),
    "max_hub_cache_mb": ("0", 0.0),
    "train_backend": (" JAX ", "jax"),
    "keras_backend": ("jax", "jax"),
    "driver_root": ("/host", "/host"),
    "worker_priority": ("10", "10"),
    "worker_idle_s": ("2.5", 2.5),
    "worker_hang_s": ("60", 60.0),
    "worker_models": ("1", 1),
    "compile_cache": ("/tmp/compile-cache", "/tmp/compile-cache"),
    "compile_cache_mb": ("64", 64.0),
}


def test_every_field_has_a_variable_and_a_sample_here():
    assert set(SAMPLES) == set(FIELDS)
    assert len(set(FIELDS.values())) == len(FIELDS)


def test_the_defaults():
    assert Settings.from_env({}) == Settings()
    s = Settings()
    assert (s.checkpoints, s.data_dir, s.cifar_url, s.shared, s.train_backend) == (None, None, None, None, None)
    assert (s.mcp, s.prewarm, s.warm_shapes, s.server_name) == (True, "on", ((5, 800), (10, 800)), "127.0.0.1")
    assert (s.max_epochs, s.max_images, s.max_zip_mb, s.max_upload_mb, s.max_pixels) == (
        30, 50_000, 200, 25, 40_000_000)
    assert (s.max_queue, s.max_runs, s.max_run_mb, s.run_ttl_hours, s.max_hub_mb, s.max_hub_cache_mb) == (
        3, 20, 200.0, 24.0, 50.0, 500.0)
    assert (s.worker_priority, s.worker_idle_s, s.worker_hang_s, s.worker_models, s.compile_cache_mb) == (
        "idle", 600.0, 180.0, 4, 512.0)
    assert (s.driver_root, s.keras_backend, s.hf_hub_offline) == ("/", "tensorflow", False)


def test_the_objects_built_from_settings_take_the_same_defaults():
    from explorer.checkpoints.finetuned import SharedLimits
    from explorer.data.inputs import MAX_PIXELS, MAX_UPLOAD_BYTES
    from explorer.finetune.plan import Limits
    s = Settings()
    assert SharedLimits() == SharedLimits.from_settings(s) and Limits() == Limits.from_settings(s)
    assert (MAX_PIXELS, MAX_UPLOAD_BYTES) == (s.max_pixels, s.max_upload_mb * 2**20)


@pytest.mark.parametrize("field", sorted(SAMPLES))
def test_each_variable_is_parsed(field):
    text, value = SAMPLES[field]
    assert getattr(Settings.from_env({FIELDS[field]: text}), field) == value
    assert Settings.read(field, {FIELDS[field]: text}) == value


def test_a_blank_variable_takes_the_default():
    blank = {name: "  " for name in FIELDS.values() if name != "GRADIO_MCP_SERVER"}
    assert Settings.from_env(blank) == Settings()
    # Gradio's MCP variable counts when it is set at all: Gradio then decides.
    assert Settings.from_env({"GRADIO_MCP_SERVER": ""}).gradio_mcp_server == ""


def test_flags_take_the_usual_words():
    for word in ("1", "true", "Yes", "ON"):
        assert Settings.from_env({"EXPLORER_SHARED": word}).shared is True
    for word in ("0", "false", "No", "OFF"):
        assert Settings.from_env({"EXPLORER_SHARED": word}).shared is False
        assert Settings.from_env({"EXPLORER_PREWARM": word}).prewarm == "off"
    # huggingface_hub's own flag, read as huggingface_hub reads it: anything else is off
    assert Settings.from_env({"HF_HUB_OFFLINE": "maybe"}).hf_hub_offline is False


@pytest.mark.parametrize("name, text, message", [
    ("EXPLORER_MAX_EPOCHS", "many", "EXPLORER_MAX_EPOCHS='many': expected a whole number, 0 or more"),
    ("EXPLORER_MAX_UPLOAD_MB", "2.5", "EXPLORER_MAX_UPLOAD_MB='2.5': expected a whole number, 0 or more"),
    ("EXPLORER_MAX_QUEUE", "-1", "EXPLORER_MAX_QUEUE='-1': expected a whole number, 0 or more"),
    ("EXPLORER_RUN_TTL_HOURS", "inf", "EXPLORER_RUN_TTL_HOURS='inf': expected a finite number, 0 or more"),
    ("EXPLORER_MAX_HUB_MB", "-0.5", "EXPLORER_MAX_HUB_MB='-0.5': expected a finite number, 0 or more"),
    ("EXPLORER_WORKER_HANG_S", "0", "EXPLORER_WORKER_HANG_S='0': expected a positive number of seconds"),
    ("EXPLORER_COMPILE_CACHE_MB", "ten", "EXPLORER_COMPILE_CACHE_MB='ten': expected a positive number of megabytes"),
    ("EXPLORER_MCP", "maybe", "EXPLORER_MCP='maybe': expected 1/true/yes/on or 0/false/no/off"),
    ("EXPLORER_SHARED", "2", "EXPLORER_SHARED='2': expected 1/true/yes/on or 0/false/no/off"),
    ("EXPLORER_PREWARM", "later", "EXPLORER_PREWARM='later': expected 1/true/yes/on, 0/false/no/off or compile"),
    ("EXPLORER_WARM_SHAPES", "5x800,ten", "EXPLORER_WARM_SHAPES='5x800,ten': expected shapes as classes x images"),
    ("EXPLORER_WORKER_PRIORITY", "low", "EXPLORER_WORKER_PRIORITY='low': expected idle, normal or a niceness"),
])
def test_a_bad_value_is_refused_with_the_variable_and_the_value(name, text, message):
    with pytest.raises(SettingsError) as e:
        Settings.from_env({name: text})
    assert str(e.value).startswith(message)
    assert isinstance(e.value, ValueError)


def test_a_value_given_as_an_argument_is_held_to_the_same_rule():
    assert Settings.check("worker_priority", " normal ") == "normal"
    assert Settings.check("worker_priority", None) == "idle"
    with pytest.raises(SettingsError, match="EXPLORER_WORKER_PRIORITY='high'"):
        Settings.check("worker_priority", "high")


def test_settings_are_frozen():
    s = Settings.from_env({"EXPLORER_MAX_EPOCHS": "5"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.max_epochs = 6
    assert dataclasses.replace(s, max_epochs=6).max_epochs == 6 and s.max_epochs == 5


def test_the_runner_reads_its_environ_and_hands_the_worker_its_settings(tmp_path):
    from explorer.finetune.runner import FineTuneRunner
    runner = FineTuneRunner(tmp_path / "out", environ={"EXPLORER_WORKER_PRIORITY": "normal",
                                                       "EXPLORER_WORKER_HANG_S": "30"})
    assert (runner.supervisor.priority, runner.hang_s, runner.supervisor.idle_s) == ("normal", 30.0, 600.0)
    given = Settings(worker_idle_s=5.0, worker_models=2, compile_cache_mb=64.0)
    runner = FineTuneRunner(tmp_path / "out", environ={}, settings=given, compile_cache=tmp_path / "cache")
    worker = Settings.from_env(runner.supervisor.env("jax"))
    assert (worker.worker_idle_s, worker.worker_models, worker.compile_cache_mb) == (5.0, 2, 64.0)
    assert worker.compile_cache == str(tmp_path / "cache")


def test_the_docs_table_is_the_settings_table():
    page = (ROOT / "docs" / "settings.md").read_text()
    assert Settings.markdown_table() in page, "docs/settings.md's table: paste `python -m explorer.settings`"


def test_every_explorer_variable_named_in_the_code_or_docs_is_a_setting():
    known = set(FIELDS.values())
    pattern = re.compile(r"\bEXPLORER_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_*])")
    pages = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for path in [*pages, ROOT / "app.py", *sorted((ROOT / "explorer").rglob("*.py"))]:
        unknown = set(pattern.findall(path.read_text())) - known
        assert not unknown, f"{path.relative_to(ROOT)} names {sorted(unknown)}, which Settings does not hold"


def test_only_settings_reads_the_environment_for_a_setting():
    """Every EXPLORER_* variable is read in explorer/core/settings.py alone; what
    other modules do with os.environ is what a child process or a library is given."""
    read = re.compile(r"(os\.environ(\.get)?\s*[\[(]|os\.getenv\()\s*[\"']EXPLORER_")
    for path in sorted((ROOT / "explorer").rglob("*.py")):
        if path.name == "settings.py":
            continue
        assert not read.search(path.read_text()), f"{path.relative_to(ROOT)} reads an EXPLORER_* variable itself"
