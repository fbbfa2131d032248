"""Every setting read from the environment, in one frozen `Settings`: read once where a program starts
(`Settings.from_env()` in app.py's build, the fine-tuning worker, the train and study command lines), then
passed down. A value that cannot be used is refused with a SettingsError that quotes the variable and the
value; an unset or blank variable takes its default.

The EXPLORER_* variables are the project's own (docs/settings.md is this module's table:
`python -m explorer.settings` prints it). A few other tools' variables are read here too, where the code
decides something by them: SPACE_ID (set on a Hugging Face Space), HF_HUB_OFFLINE (parsed as
huggingface_hub parses it), KERAS_BACKEND and KERAS_HOME (Keras'), GRADIO_SERVER_NAME and GRADIO_MCP_SERVER
(Gradio's). What a child process is given (the worker's environment, PYTHONPATH, XLA and JAX flags) is not a
setting: it is built where the process is started.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The folder holding the explorer package (a clone's root, a Space's folder): the one place the default
# checkpoints, the data beside it and a child process's import path are found from.
PROJECT = Path(__file__).resolve().parents[2]

ON = ("1", "true", "yes", "on")
OFF = ("0", "false", "no", "off")


class SettingsError(ValueError):
    """An environment variable whose value cannot be used; the message quotes the variable and the value."""


def _setting(env: str, default, kind: str, doc: str, shown: str | None = None):
    """A field read from the variable `env`, parsed as `kind` (see `parse`); `doc` and `shown` (the default
    as docs/settings.md says it, when it is not the value itself) make its row of docs/settings.md's table."""
    return field(default=default, metadata={"env": env, "kind": kind, "doc": doc, "shown": shown})


def _number(name: str, text: str, whole: bool, positive: bool, what: str):
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise SettingsError(f"{name}={text!r}: expected {what}")
    return value


def _shapes(name: str, text: str) -> tuple[tuple[int, int], ...]:
    shapes = []
    for item in text.split(","):
        if not item.strip():
            continue
        classes, times, images = item.strip().partition("x")
        if not (times and classes.isdigit() and images.isdigit()):
            raise SettingsError(f"{name}={text!r}: expected shapes as classes x images, comma-separated "
                                f"(5x800,10x800)")
        shapes.append((int(classes), int(images)))
    return tuple(shapes)


def parse(name: str, text: str, kind: str):
    """The value of the variable `name` given as `text` (not blank), by its `kind`."""
    word = text.strip().lower()
    if kind in ("text", "raw"):
        return text
    if kind == "name":  # a word compared case-blind; its own check is where it is used
        return word
    if kind == "count":
        return _number(name, text, True, False, "a whole number, 0 or more")
    if kind == "amount":
        return _number(name, text, False, False, "a finite number, 0 or more")
    if kind in ("seconds", "megabytes"):
        return _number(name, text, False, True, f"a positive number of {kind}")
    if kind == "flag":
        if word in ON + OFF:
            return word in ON
        raise SettingsError(f"{name}={text!r}: expected {'/'.join(ON)} or {'/'.join(OFF)}")
    if kind == "hf_flag":  # huggingface_hub's own reading of its flags: anything else is off
        return text.strip().upper() in ("1", "ON", "YES", "TRUE")
    if kind == "prewarm":
        if word in ON + OFF:
            return "on" if word in ON else "off"
        if word == "compile":
            return word
        raise SettingsError(f"{name}={text!r}: expected {'/'.join(ON)}, {'/'.join(OFF)} or compile")
    if kind == "priority":
        if text.strip() in ("idle", "normal") or re.fullmatch(r"-?\d+", text.strip()):
            return text.strip()
        raise SettingsError(f"{name}={text!r}: expected idle, normal or a niceness")
    if kind == "shapes":
        return _shapes(name, text)
    raise AssertionError(f"unknown kind {kind!r} of {name}")


@dataclass(frozen=True)
class Settings:
    """The settings of one process, each field from its environment variable (docs/settings.md)."""

    # --- where things are ---------------------------------------------------------------------------
    checkpoints: str | None = _setting(
        "EXPLORER_CHECKPOINTS", None, "text",
        "the folder of checkpoints the app lists, loads and fine-tunes into", "`checkpoints/` in the project")
    data_dir: str | None = _setting(
        "EXPLORER_DATA_DIR", None, "text",
        "a folder holding CIFAR's python folders, looked in first (`--data-dir` wins); the app also looks in "
        "`../shared/data` beside the project", "none")
    cifar_url: str | None = _setting(
        "EXPLORER_CIFAR_URL", None, "text",
        "where CIFAR's archives are downloaded from (a mirror)", "`https://www.cs.toronto.edu/~kriz/`")
    keras_home: str | None = _setting(
        "KERAS_HOME", None, "text", "Keras' own: downloads go into its `datasets/`", "`~/.keras`")

    # --- the app ------------------------------------------------------------------------------------
    model_a: str = _setting("EXPLORER_MODEL_A", "paper/cifar10-vanilla", "text",
                            "the model slot A holds on a first visit, with B's (a checkpoint's reference; "
                            "docs/app.md, The first visit); where the pair is not here, the shipped pair")
    model_b: str = _setting("EXPLORER_MODEL_B", "paper/cifar10-spt_lsa", "text",
                            "the model slot B holds on a first visit (e.g. `cifar10-spt_lsa`)")
    mcp: bool = _setting("EXPLORER_MCP", True, "flag", "serve the tools over MCP as well (`--no-mcp` too)", "`1`")
    server_name: str = _setting(
        "GRADIO_SERVER_NAME", "127.0.0.1", "text", "Gradio's: the address the app listens on (`--host`)")
    gradio_mcp_server: str | None = _setting(
        "GRADIO_MCP_SERVER", None, "raw", "Gradio's: when set, Gradio decides whether MCP is served", "unset")
    space_id: str | None = _setting(
        "SPACE_ID", None, "text", "set by Hugging Face on a Space: shared mode, and the Duplicate button",
        "unset")
    hf_hub_offline: bool = _setting(
        "HF_HUB_OFFLINE", False, "hf_flag", "huggingface_hub's: Hub checkpoints come from its cache only", "unset")
    prewarm: str = _setting(
        "EXPLORER_PREWARM", "on", "prewarm",
        "start the fine-tuning worker with the app (0: at the first Start); on a GPU it also compiles the "
        "shipped pair's steps, elsewhere too with `compile`", "`1`")
    warm_shapes: tuple[tuple[int, int], ...] = _setting(
        "EXPLORER_WARM_SHAPES", ((5, 800), (10, 800)), "shapes",
        "the shapes (classes x images) a prewarmed worker compiles", "`5x800,10x800`")

    # --- what a run may ask for (every visitor) -----------------------------------------------------
    max_epochs: int = _setting("EXPLORER_MAX_EPOCHS", 30, "count", "a fine-tuning run's epochs at most")
    max_images: int = _setting("EXPLORER_MAX_IMAGES", 50_000, "count", "a fine-tuning run's images at most")
    max_zip_mb: int = _setting("EXPLORER_MAX_ZIP_MB", 200, "count", "an uploaded zip of images, megabytes at most")
    max_upload_mb: int = _setting("EXPLORER_MAX_UPLOAD_MB", 25, "count", "an uploaded image file, megabytes at most")
    max_pixels: int = _setting("EXPLORER_MAX_PIXELS", 40_000_000, "count", "an uploaded image's pixels at most")

    # --- shared mode (a public Space) ---------------------------------------------------------------
    shared: bool | None = _setting(
        "EXPLORER_SHARED", None, "flag", "shared mode on (1) or off (0), whatever SPACE_ID says",
        "on where SPACE_ID is set")
    browser_secret: str | None = _setting(
        "EXPLORER_BROWSER_SECRET", None, "text", "the key visitors' ids are encrypted with in their browsers",
        "one kept in `checkpoints/.browser-secret`")
    max_queue: int = _setting("EXPLORER_MAX_QUEUE", 3, "count", "Starts waiting behind the run going on")
    max_runs: int = _setting("EXPLORER_MAX_RUNS", 20, "count", "fine-tuning runs kept, all visitors together")
    max_run_mb: float = _setting("EXPLORER_MAX_RUN_MB", 200.0, "amount", "their checkpoints, megabytes, all together")
    run_ttl_hours: float = _setting("EXPLORER_RUN_TTL_HOURS", 24.0, "amount", "hours a run is kept after it ended")
    max_hub_mb: float = _setting(
        "EXPLORER_MAX_HUB_MB", 50.0, "amount", "a Hub checkpoint's files, megabytes, checked before fetching")
    max_hub_cache_mb: float = _setting(
        "EXPLORER_MAX_HUB_CACHE_MB", 500.0, "amount", "the app's Hub cache, megabytes at most")

    # --- the fine-tuning worker ---------------------------------------------------------------------
    train_backend: str | None = _setting(
        "EXPLORER_TRAIN_BACKEND", None, "name", "the Keras backend runs train on: jax, tensorflow or torch",
        "JAX on a CUDA GPU or the CPU, else the app's")
    keras_backend: str = _setting(
        "KERAS_BACKEND", "tensorflow", "text", "Keras': the app's backend (what runs fall back to)")
    driver_root: str = _setting(
        "EXPLORER_DRIVER_ROOT", "/", "text", "where the NVIDIA driver's `/proc` and `/dev` are seen")
    worker_priority: str = _setting(
        "EXPLORER_WORKER_PRIORITY", "idle", "priority",
        "the worker's CPU priority: idle (only what the app leaves), a niceness, or normal")
    worker_idle_s: float = _setting(
        "EXPLORER_WORKER_IDLE_S", 600.0, "seconds", "the worker ends after this long without a run")
    worker_hang_s: float = _setting(
        "EXPLORER_WORKER_HANG_S", 180.0, "seconds", "a worker silent this long during a run is killed")
    worker_models: int = _setting("EXPLORER_WORKER_MODELS", 4, "count", "models a worker keeps compiled")
    compile_cache: str | None = _setting(
        "EXPLORER_COMPILE_CACHE", None, "text", "the worker's JAX compilation cache (the app sets it)",
        "`checkpoints/.compile-cache`")
    compile_cache_mb: float = _setting(
        "EXPLORER_COMPILE_CACHE_MB", 512.0, "megabytes", "that cache, megabytes at most")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings `environ` (default: this process's environment) gives; SettingsError for a value
        that cannot be used."""
        env = os.environ if environ is None else environ
        return cls(**{f.name: cls.check(f.name, env.get(f.metadata["env"])) for f in dataclasses.fields(cls)})

    @classmethod
    def check(cls, field_name: str, text: str | None):
        """`text` parsed as the field `field_name`'s variable would be (a value given another way, such as
        an argument, is held to the same rule); its default when None or blank."""
        f = _field(cls, field_name)
        if text is None or not (f.metadata["kind"] == "raw" or text.strip()):
            return f.default
        return parse(f.metadata["env"], text, f.metadata["kind"])

    @classmethod
    def read(cls, field_name: str, environ: Mapping[str, str] | None = None):
        """One setting as the environment says it now, for a caller that must follow it while the process
        runs (huggingface_hub's HF_HUB_OFFLINE); everything else is read once, by from_env."""
        f = _field(cls, field_name)
        return cls.check(field_name, (os.environ if environ is None else environ).get(f.metadata["env"]))

    @classmethod
    def markdown_table(cls) -> str:
        """docs/settings.md's table: every variable, its default and what it sets."""
        rows = ["| Variable | Default | What it sets |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            value = f"{f.default:g}" if isinstance(f.default, float) else f"{f.default}"
            shown = f.metadata["shown"] or f"`{value}`"
            rows.append(f"| `{f.metadata['env']}` | {shown} | {f.metadata['doc']} |")
        return "\n".join(rows)


def _field(cls, name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(cls) if f.name == name)


if __name__ == "__main__":
    print(Settings.markdown_table())
