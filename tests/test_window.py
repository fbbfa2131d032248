"""A GPU window's command, rehearsed on the CPU with tiny settings: a run cut into windows by its time budget,
each window's output within the device's return limits and collected into the state, ends with the model the
uninterrupted run trains."""

from __future__ import annotations

import io
import json
import types

import keras
import numpy as np
import pytest

from explorer.data.packed import pack
from tests.helpers import JAX_CPU_XLA_FLAGS, run_on_jax
from tools import window

TRAIN = ["--preset", "tiny", "--variant", "spt_lsa", "--train-on-all", "--epochs", "3", "--batch-size", "32",
         "--val-fraction", "0.1", "--mixup", "1", "--cutmix", "1", "--mix-prob", "0.5", "--randaugment", "0.5",
         "--device-data"]


class _Clock:
    """One second per reading, in every module that reads it: a window's length is a function of the code."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 1.0
        return self.now

    def time(self):
        return 1.8e9 + self.now


@pytest.fixture(scope="module")
def packed(data_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("packed") / "cifar10-q90-train.npz"
    pack(data_dir, path, splits=("train",))
    return path


def _window(monkeypatch, tmp_path, packed, budget, state, n):
    import explorer.training.fitting as fitting
    clock = _Clock()
    fake = types.SimpleNamespace(perf_counter=clock.perf_counter, time=clock.time)
    monkeypatch.setattr(fitting, "time", fake)
    monkeypatch.setattr(window, "time", fake)
    out = tmp_path / f"out-{n}"
    code = window.main(["--state", str(state), "--out", str(out), "--budget", str(budget), "--reserve", "1",
                        "--work", str(tmp_path / "work"), "--dataset", str(packed), "--subset", "320", *TRAIN])
    assert code == 0
    return out


@pytest.mark.slow
def test_windows_resume_into_the_uninterrupted_run_and_come_back_within_the_limits(monkeypatch, tmp_path, packed,
                                                                                    capsys):
    # The uninterrupted run, in one window with room to spare.
    whole_state = tmp_path / "whole"
    out = _window(monkeypatch, tmp_path, packed, 10_000, whole_state, 0)
    print(window.collect(out, whole_state))
    whole = [json.loads(line) for line in (whole_state / window.WINDOWS).read_text().splitlines()]
    assert len(whole) == 1 and whole[0]["finished"] and (whole_state / "checkpoint" / "model.weights.h5").is_file()
    # About one epoch's time per window: three windows, the first two ending with a backup.
    per_epoch = json.loads((whole_state / "checkpoint" / "explorer.json").read_text())["history"][0]["time_s"]
    state = tmp_path / "state"
    records = []
    for n in range(1, 6):
        out = _window(monkeypatch, tmp_path, packed, 1.25 * per_epoch + 3, state, n)
        assert window.check_return(out)["files"] <= window.RETURN_FILES
        print(window.collect(out, state))
        records = [json.loads(line) for line in (state / window.WINDOWS).read_text().splitlines()]
        if records[-1]["finished"]:
            break
        assert (state / "backup" / "run.json").is_file() and not (state / "checkpoint").exists()
    assert [(r["epochs_before"], r["epochs_after"]) for r in records] == [(0, 1), (1, 2), (2, 3)]
    assert not (state / "backup").exists()
    from explorer.checkpoints.store import load_folder
    a, _ = load_folder(whole_state / "checkpoint")
    b, card = load_folder(state / "checkpoint")
    for x, y in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(x, y)
    assert card.training.epochs == 3 and card.dataset.name == "cifar10"
    # A finished state takes no further window.
    monkeypatch.setattr(window, "time", _Clock())
    assert window.main(["--state", str(state), "--out", str(tmp_path / "again"), "--budget", "100",
                        "--dataset", str(packed), *TRAIN]) == 2
    assert "this run is done" in capsys.readouterr().err


def test_large_files_travel_in_parts_and_a_damaged_part_is_refused(tmp_path):
    folder = tmp_path / "backup"
    folder.mkdir()
    big = np.random.default_rng(0).bytes(2_500_000)
    (folder / "epoch-0003.weights.h5").write_bytes(big)
    (folder / "run.json").write_text("{}")
    window.split_files(folder, tmp_path / "out", part_bytes=1_000_000)
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["epoch-0003.weights.h5.part-00", "epoch-0003.weights.h5.part-01",
                     "epoch-0003.weights.h5.part-02", "parts.json", "run.json"]
    window.join_files(tmp_path / "out", tmp_path / "joined")
    assert (tmp_path / "joined" / "epoch-0003.weights.h5").read_bytes() == big
    part = tmp_path / "out" / "epoch-0003.weights.h5.part-01"
    part.write_bytes(part.read_bytes()[:-1] + b"\0")
    with pytest.raises(window.WindowError, match="not the file that was cut"):
        window.join_files(tmp_path / "out", tmp_path / "joined-again")
    part.unlink()
    with pytest.raises(window.WindowError, match="lacks its parts"):
        window.join_files(tmp_path / "out", tmp_path / "joined-again")


def test_a_finished_run_ships_evaluated_lean_and_with_its_windows(tiny_checkpoints, data_dir, tmp_path, capsys):
    """`ship`: the checkpoint a last window sent back (in parts), as the app lists it: its windows on the card
    and its README, its test metrics measured on the whole test split, the weights as trained; refused, with
    nothing written, while the run is unfinished or where the name is taken."""
    from explorer.checkpoints.store import load_checkpoint, read_card
    from explorer.model.predict import predict_logits
    state, dest = tmp_path / "state", tmp_path / "checkpoints" / "paper" / "cifar10-vanilla"
    records = [{"window": 1, "started": "2026-11-27T13:16:04+00:00", "device": "GPU (NVIDIA H200)", "budget_s": 320,
                "epochs_before": 0, "epochs_after": 17, "planned_epochs": 100, "finished": False,
                "images_per_second": 8315.5, "wall_s": 285.4},
               {"window": 2, "started": "2026-11-28T10:00:00+00:00", "device": "GPU (NVIDIA H100 80GB HBM3)",
                "budget_s": 540, "epochs_before": 17, "epochs_after": 100, "planned_epochs": 100, "finished": True,
                "images_per_second": 10864.9, "wall_s": 505.1}]
    state.mkdir()
    (state / window.WINDOWS).write_text(json.dumps(records[0]) + "\n")
    assert window.main(["ship", str(state), str(dest), "--data-dir", str(data_dir)]) == 2
    assert "no finished checkpoint yet: 17 of 100 epochs" in capsys.readouterr().err and not dest.parent.exists()

    window.split_files(tiny_checkpoints["vanilla"], state / "checkpoint", part_bytes=50_000)  # as it comes back
    (state / window.WINDOWS).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert window.main(["ship", str(state), str(dest), "--data-dir", str(data_dir)]) == 0
    assert "test top-1" in capsys.readouterr().out
    card = read_card(dest)
    # named apart from the shipped cifar10-vanilla, whose folder name it shares
    assert card.name == "cifar10-paper-vanilla"
    assert card.metrics.test_count == 1000 and card.metrics.test_top1 is not None
    assert [(w.window, w.device, w.epochs_after) for w in card.training.windows] == [
        (1, "GPU (NVIDIA H200)", 17), (2, "GPU (NVIDIA H100 80GB HBM3)", 100)]
    readme = (dest / "README.md").read_text()
    assert "## Training windows" in readme and "Trained in 2 windows of a lent GPU" in readme
    assert "# cifar10-paper-vanilla" in readme and window.shipped_name(tmp_path / "cifar10-spt") == "cifar10-spt"
    assert "epochs 17 → 100 in 505 s at 10,865 images/s" in readme
    x = np.random.default_rng(0).integers(0, 256, (4, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(predict_logits(load_checkpoint(dest)[0], x),
                                  predict_logits(load_checkpoint(tiny_checkpoints["vanilla"])[0], x))
    # the state keeps its log and where the weights went, not a second copy of them; it is done
    assert sorted(p.name for p in state.iterdir()) == [window.SHIPPED, window.WINDOWS]
    assert json.loads((state / window.SHIPPED).read_text())["checkpoint"] == dest.as_posix()
    assert window.main(["ship", str(state), str(dest), "--data-dir", str(data_dir)]) == 2
    assert f"done, shipped as {dest.as_posix()}" in capsys.readouterr().err
    assert window.main(["--state", str(state), "--out", str(tmp_path / "out"), "--budget", "60",
                        "--preset", "tiny"]) == 2
    assert "this run is done" in capsys.readouterr().err and not (tmp_path / "out").exists()
    again = tmp_path / "again"
    window.split_files(tiny_checkpoints["vanilla"], again / "checkpoint", part_bytes=50_000)
    (again / window.WINDOWS).write_text("".join(json.dumps(r) + "\n" for r in records))
    before = sorted(p.name for p in dest.iterdir())
    assert window.main(["ship", str(again), str(dest), "--data-dir", str(data_dir)]) == 2
    assert "exists" in capsys.readouterr().err and sorted(p.name for p in dest.iterdir()) == before
    assert (again / "checkpoint").is_dir()  # a refused ship keeps the state as it was
    assert [p.name for p in dest.parent.iterdir()] == ["cifar10-vanilla"]  # no temporary folder left


def test_what_would_not_come_back_is_refused(tmp_path):
    for i in range(window.RETURN_FILES + 1):
        (tmp_path / f"f{i}").write_text("x")
    with pytest.raises(window.WindowError, match="9 files"):
        window.check_return(tmp_path)


def test_a_paper_scale_backup_fits_the_return_limits(tmp_path):
    """The paper preset's backup (weights, AdamW's two moments) is 32 MB: in parts it comes back."""
    from explorer.model.config import get_preset
    from explorer.model.models import build_vit
    from explorer.training.recipe import TrainConfig, compile_for_run
    model = build_vit(get_preset("paper"), 10)
    compile_for_run(model, TrainConfig(), 10, total_steps=10)
    model.optimizer.build(model.trainable_variables)
    folder = tmp_path / "backup"
    folder.mkdir()
    model.save_weights(folder / "epoch-0001.weights.h5")
    (folder / "run.json").write_text("{}")
    (folder / "training_metadata.json").write_text("{}")
    assert (folder / "epoch-0001.weights.h5").stat().st_size > window.RETURN_FILE_BYTES
    window.split_files(folder, tmp_path / "out" / "backup")
    (tmp_path / "out" / window.WINDOWS).write_text("{}\n")
    assert window.check_return(tmp_path / "out")["files"] <= 7
    keras.backend.clear_session()


def cached_window_report() -> dict:
    """On JAX: one tiny window with --compile-cache (WINDOW_TEST_CACHE), in a folder of its own
    (WINDOW_TEST_TMP/<WINDOW_TEST_NAME>); its record (what it compiled and loaded from the cache)."""
    import os
    import time
    from pathlib import Path
    tmp = Path(os.environ["WINDOW_TEST_TMP"]) / os.environ["WINDOW_TEST_NAME"]
    since = time.time()
    if os.environ.get("WINDOW_TEST_CACHE_IN"):
        print(window.cache_in(Path(os.environ["WINDOW_TEST_CACHE_IN"]), Path(os.environ["WINDOW_TEST_CACHE"])))
    code = window.main(["--state", str(tmp / "state"), "--out", str(tmp / "out"), "--budget", "600", "--reserve",
                        "1", "--work", str(tmp / "work"), "--compile-cache", os.environ["WINDOW_TEST_CACHE"],
                        "--dataset", os.environ["WINDOW_TEST_PACKED"], "--subset", "64", "--preset", "tiny",
                        "--train-on-all", "--epochs", "1", "--batch-size", "32", "--fast"])
    kept = window.cache_out(Path(os.environ["WINDOW_TEST_CACHE"]), tmp / "jax-cache.tar", since)
    record = json.loads((tmp / "out" / window.WINDOWS).read_text().splitlines()[-1]) if code == 0 else {}
    return {"code": code, "backend": keras.backend.backend(), "compiled": record.get("compiled"),
            "hits": record.get("compile_cache_hits"), "kept": kept}


@pytest.mark.slow  # about 10 s or more (pytest.ini)
def test_a_windows_compiled_steps_go_from_one_gpu_to_the_next(monkeypatch, packed, tmp_path):
    """A window keeps its compiled steps in JAX's persistent cache; cache-out packs the ones it used into one
    returned file, and on the next machine of the same kind cache-in puts them back: that window loads every
    step instead of compiling it. A tar made elsewhere is left, and said so."""
    import tarfile
    monkeypatch.setenv("WINDOW_TEST_PACKED", str(packed))
    monkeypatch.setenv("WINDOW_TEST_TMP", str(tmp_path))
    monkeypatch.setenv("WINDOW_TEST_NAME", "first")
    monkeypatch.setenv("WINDOW_TEST_CACHE", str(tmp_path / "cache-first"))
    first = run_on_jax("tests.test_window:cached_window_report", timeout=600)
    assert first["code"] == 0 and first["backend"] == "jax"
    assert first["compiled"] > 0 and first["hits"] == 0, first
    tar = tmp_path / "first" / "jax-cache.tar"
    assert f"kept {first['compiled']} compiled steps in {tar}" in first["kept"], first
    with tarfile.open(tar) as kept:
        meta = json.loads(kept.extractfile(window.CACHE_META).read())
    assert meta["platform"] == "cpu" and meta["entries"] == first["compiled"] and meta["left_out"] == 0

    monkeypatch.setenv("WINDOW_TEST_NAME", "next")  # the next machine: an empty cache, the tar put in first
    monkeypatch.setenv("WINDOW_TEST_CACHE", str(tmp_path / "cache-next"))
    monkeypatch.setenv("WINDOW_TEST_CACHE_IN", str(tar))
    following = run_on_jax("tests.test_window:cached_window_report", timeout=600)
    assert following["code"] == 0
    assert following["compiled"] == 0 and following["hits"] == first["compiled"], following

    foreign = tmp_path / "foreign.tar"  # the same steps, said to be compiled on another device
    with tarfile.open(tar) as source, tarfile.open(foreign, "w") as out:
        for member in source.getmembers():
            data = source.extractfile(member).read()
            if member.name == window.CACHE_META:
                data = json.dumps(dict(meta, device="NVIDIA H100 80GB HBM3", platform="gpu")).encode()
                member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    said = window.cache_in(foreign, tmp_path / "cache-elsewhere")
    assert "not used, compiled elsewhere" in said and "NVIDIA H100" in said, said
    assert not (tmp_path / "cache-elsewhere").exists()
    (tmp_path / "broken.tar").write_bytes(b"not a tar")
    with pytest.raises(window.WindowError, match="is not what cache-out writes"):
        window.cache_in(tmp_path / "broken.tar", tmp_path / "cache-elsewhere")


@pytest.mark.slow  # about 10 s or more (pytest.ini)
def test_the_gpu_sessions_script_measures_then_trains_a_window(tmp_path, packed):
    """tools/gpu_session.sh as a lent GPU runs it (its bench stage once failed there unseen), rehearsed on the
    CPU with tiny settings: the bench's row and the window's line in the log, the state ready to collect."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    out, state = tmp_path / "out", tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(OUT=str(out), KEEP=str(tmp_path / "kept"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               JAX_PLATFORMS="cpu", XLA_FLAGS=JAX_CPU_XLA_FLAGS,  # as run_on_jax compiles
               BENCH_PRESET="tiny", BENCH_ONLY="device bf16 x16,host float32", BENCH_STEPS="2",
               # The bench and the window without RandAugment: a tiny step with it compiles five times as long
               # (the bench's stage 105 to 19 CPU-seconds), and their part here is the script's stages, not the
               # recipe: tests/test_step_augment.py compiles RandAugment into a step on JAX.
               BENCH_ARGS="--randaugment 0", BENCH_S="300",
               WINDOW_ARGS=f"--preset tiny --train-on-all --subset 64 --epochs 1 --dataset {packed} "
                           f"--work {tmp_path / 'work'} --randaugment 0",
               CACHE=str(tmp_path / "cache"), CACHE_TAR=str(tmp_path / "no-cache-yet.tar"))
    done = subprocess.run(["bash", "tools/gpu_session.sh", "both", str(state), "vanilla", "500"], env=env,
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=900)
    log = (out / "session.log").read_text()
    assert done.returncode == 0, log[-3000:]
    assert "== bench: exit 0" in log, log[-3000:]
    start = log.index("\n{\n") + 1  # fast_path.json, printed into the log
    rows = json.loads(log[start:log.index("\n}\n", start) + 2])["rows"]
    assert [r["setting"] for r in rows] == ["device bf16 x16", "host float32"]  # --only's order
    assert all(r["images_per_second"] > 0 and len(r["epoch_s"]) == 1 for r in rows)
    assert "== window: exit 0" in log and "window 1: epochs 0 -> 1 of 1" in log, log[-3000:]
    assert "kept " in log and " compiled steps in " in log and (out / "jax-cache.tar").is_file(), log[-3000:]
    assert window.check_return(out)["files"] <= window.RETURN_FILES
    assert (tmp_path / "kept" / "windows.jsonl").read_text() == (out / "state" / "windows.jsonl").read_text()
    assert "done after 1 windows" in window.collect(out / "state", state)


def test_a_second_call_on_a_fresh_machine_is_refused_not_started_anew(tmp_path):
    """STATE "warm" carries on from the state the previous call left on the machine; on a fresh machine there
    is none, and starting anew would overwrite nothing but waste the GPU's minutes: it is refused first."""
    import os
    import subprocess
    from pathlib import Path
    env = dict(os.environ, OUT=str(tmp_path / "out"), KEEP=str(tmp_path / "kept"))
    done = subprocess.run(["bash", "tools/gpu_session.sh", "window", "warm", "vanilla", "100"], env=env,
                          cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "no window's state kept" in done.stderr and "fresh" in done.stderr
    assert not (tmp_path / "out").exists()


def _trace(path, events, processes):
    import gzip
    meta = [{"ph": "M", "pid": pid, "name": "process_name", "args": {"name": name}} for pid, name in processes.items()]
    with gzip.open(path, "wt") as f:
        json.dump({"displayTimeUnit": "ns", "traceEvents": meta + events}, f)
    return path


def test_a_profile_says_where_the_devices_time_went(tmp_path, capsys):
    """profile_summary (`python tools/window.py profile TRACE`, the reader of a GPU window's --profile): the
    device's busy time is the union of its streams' events, the rest of the span idle; its time is summed by
    the model's scopes from JAX's name stacks (the backward pass apart) and by kernel; the host's events are
    not device time."""
    step = "jit(multi_step)/while/body/jit(train_step)"
    attention = {"tf_op": f"{step}/jvp(vi_t)/jvp(transformer_block_3)/jvp(multi_head_attention)/dot_general"}
    backward = {"tf_op": f"{step}/transpose(jvp(vi_t))/transpose(jvp(transformer_block_1))/"
                         "transpose(jvp(multi_head_attention))/dot_general"}
    augment = {"tf_op": f"{step}/jvp(random_augment)/gather"}
    events = [  # ts and dur in microseconds; the device is busy 0-300, 500-600 and 990-1,000 of 0-1,000
        {"ph": "X", "pid": 2, "tid": 1, "ts": 0, "dur": 200, "name": "fusion.12", "args": attention},
        {"ph": "X", "pid": 2, "tid": 2, "ts": 100, "dur": 200, "name": "fusion.13", "args": backward},
        {"ph": "X", "pid": 2, "tid": 1, "ts": 500, "dur": 100, "name": "input_gather_fusion_2", "args": augment},
        {"ph": "X", "pid": 2, "tid": 3, "ts": 990, "dur": 10, "name": "MemcpyH2D", "args": {}},
        {"ph": "X", "pid": 1, "tid": 9, "ts": 0, "dur": 5000, "name": "PjitFunction(multi_step)"},
    ]
    trace = _trace(tmp_path / "gpu.trace.json.gz", events, {1: "/host:CPU", 2: "/device:GPU:0"})
    assert window.main(["profile", str(trace)]) == 0
    said = capsys.readouterr().out
    assert "5.0 ms traced" in said and "/device:GPU:0: busy 0.4 ms of 1.0 (41 %" in said, said
    assert "idle, waiting for the host: 0.6 ms" in said and "4 device events" in said, said
    rows = said.splitlines()
    head = rows.index("  device time by group (of 0.5 ms summed over streams):")
    groups = rows[head + 1:rows.index("  largest kernels:")]
    assert [r.split("ms  ")[1] for r in groups] == [
        "vi_t/transformer_block/multi_head_attention", "vi_t/transformer_block/multi_head_attention (backward)",
        "random_augment/gather", "MemcpyH2D"], groups
    assert groups[0].split()[0] == "39.2" and "x1     fusion.12" in said, said

    host_only = _trace(tmp_path / "cpu.trace.json.gz", events[-1:], {1: "/host:CPU"})
    assert "no device events (/host:CPU): a trace on the CPU times the host only" in window.profile_summary(host_only)
    assert window.main(["profile"]) == 2 and "usage" in capsys.readouterr().err
    (tmp_path / "notes.txt").write_text("not a trace")
    assert window.main(["profile", str(tmp_path / "notes.txt")]) == 2
    assert "is not a trace of JAX's profiler" in capsys.readouterr().err


def step_profiler_report() -> dict:
    """On JAX: a StepProfiler given a window's events (its first epoch's end, then steps), with compiled steps
    running between; what it kept and said."""
    import os
    import time
    from pathlib import Path

    import jax
    import jax.numpy as jnp

    from explorer.core.card import Epoch
    from explorer.core.protocol import BatchEnd, EpochEnd
    keep = Path(os.environ["WINDOW_TEST_TMP"]) / "profile.trace.json.gz"
    profiler = window.StepProfiler(str(keep), seconds=0.3)
    step = jax.jit(lambda x: jnp.tanh(x @ x.T))
    x = step(jnp.ones((64, 64)))
    profiler(BatchEnd(1, 20, 0, 1.0, 0.1))  # during the first epoch (compiling): not yet
    traced_early = any(Path(os.environ["WINDOW_TEST_TMP"]).iterdir())
    profiler(EpochEnd(Epoch(epoch=1)))
    began = time.perf_counter()
    while time.perf_counter() - began < 0.4:
        x = step(x).block_until_ready()
        profiler(BatchEnd(2, 20, 1, 1.0, 1.0))
    after = keep.is_file()
    profiler(EpochEnd(Epoch(epoch=2)))  # once only
    report = {"traced_early": traced_early, "kept_in_time": after, "said": profiler.finish(),
              "bytes": keep.stat().st_size}
    window.RETURN_FILE_BYTES = 1  # a trace too large to come back, even with the device's events only
    large = window.StepProfiler(str(keep.with_name("large.trace.json.gz")), seconds=10)
    large(EpochEnd(Epoch(epoch=1)))
    step(x).block_until_ready()
    report.update(large=large.finish(), large_kept=keep.with_name("large.trace.json.gz").exists())
    return report


@pytest.mark.slow  # about 10 s or more (pytest.ini)
def test_a_window_profiles_steps_after_its_first_epoch(monkeypatch, tmp_path):
    monkeypatch.setenv("WINDOW_TEST_TMP", str(tmp_path))
    report = run_on_jax("tests.test_window:step_profiler_report", timeout=300)
    assert not report["traced_early"] and report["kept_in_time"], report
    assert report["said"].startswith("profile profile.trace.json.gz: ") and "traced" in report["said"], report
    assert 0 < report["bytes"] <= window.RETURN_FILE_BYTES
    assert report["large"].startswith("profile large.trace.json.gz: ") and not report["large_kept"], report
    assert "(the trace that comes back holds the device's events only)" in report["large"], report
    assert "does not come back" in report["large"], report


def test_a_trace_too_large_to_come_back_keeps_the_devices_events(tmp_path):
    events = [{"ph": "X", "pid": 2, "tid": 1, "ts": 0, "dur": 5, "name": "fusion.1", "args": {}},
              {"ph": "X", "pid": 1, "tid": 9, "ts": 0, "dur": 50, "name": "PjitFunction(multi_step)"}]
    trace = _trace(tmp_path / "t.trace.json.gz", events, {1: "/host:CPU", 2: "/device:GPU:0"})
    before = window.profile_summary(trace)
    window._device_events_only(trace)
    import gzip
    with gzip.open(trace, "rt") as f:
        kept = json.load(f)["traceEvents"]
    assert [e["name"] for e in kept] == ["process_name", "process_name", "fusion.1"]
    assert window.profile_summary(trace).split(" traced")[1] == before.split(" traced")[1]


@pytest.mark.slow  # about 10 s or more (pytest.ini)
def test_the_gpu_sessions_profile_comes_back_in_the_caches_place(tmp_path, packed):
    """PROFILE_S: the window traces its steps after its first epoch, says where the device's time went, and the
    trace comes back; with the finished state's 6 files and the log, it takes the eighth place, so the compiled
    steps stay on the machine (and the log says so) rather than the return failing."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(OUT=str(out), KEEP=str(tmp_path / "kept"), CACHE=str(tmp_path / "cache"),
               CACHE_TAR=str(tmp_path / "no-cache-yet.tar"), PROFILE_S="0.1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               JAX_PLATFORMS="cpu", XLA_FLAGS=JAX_CPU_XLA_FLAGS,
               WINDOW_ARGS=f"--preset tiny --train-on-all --subset 64 --epochs 2 --dataset {packed} "
                           f"--work {tmp_path / 'work'} --randaugment 0")
    done = subprocess.run(["bash", "tools/gpu_session.sh", "window", str(tmp_path / "state"), "vanilla", "300"],
                          env=env, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True,
                          timeout=900)
    log = (out / "session.log").read_text()
    assert done.returncode == 0 and "== window: exit 0" in log, log[-3000:]
    assert "profile profile.trace.json.gz: " in log and (out / "profile.trace.json.gz").is_file(), log[-3000:]
    assert "the compiled steps stay here: 8 files already come back" in log, log[-3000:]
    assert not (out / "jax-cache.tar").exists()
    assert window.check_return(out)["files"] == window.RETURN_FILES
