"""The state of one training run as the fit loop (explorer.training.fitting) keeps it and a backup
(explorer.training.backup) saves and restores it: `FitState` while the run goes on, `BackupMetadata` for
what a backup holds of it after its last completed epoch (training_metadata.json), `BestEpoch` for the best
validation epoch so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class BestEpoch:
    """The best validation epoch so far (a recipe with keep_best) and the model's weights after it.

    Args:
        epoch: the epoch (0: the model before any step, see finetune.choose_head's metrics).
        val_top1: its validation top-1.
        val_loss: its validation loss, when known.
        weights: the model's weights after it (model.get_weights()); a backup keeps them in a file of
            their own, not in its metadata.
    """

    epoch: int
    val_top1: float
    val_loss: float | None
    weights: list = field(default_factory=list, repr=False, compare=False)

    def beaten_by(self, record: dict) -> bool:
        """Whether an epoch's record (with val_top1) beats this one: higher top-1, then a loss no higher."""
        if record["val_top1"] != self.val_top1:
            return record["val_top1"] > self.val_top1
        return (record.get("val_loss") or 0.0) <= (self.val_loss or float("inf"))

    def to_json(self) -> dict:
        return {"epoch": self.epoch, "val_top1": self.val_top1, "val_loss": self.val_loss}

    @classmethod
    def from_json(cls, record: dict, weights: list) -> BestEpoch:
        return cls(int(record["epoch"]), record["val_top1"], record.get("val_loss"), list(weights))


@dataclass(frozen=True)
class BackupMetadata:
    """A backup's training_metadata.json: the run after its last completed epoch.

    Args:
        epoch: epochs completed (Keras' BackupAndRestore reads this as the epoch to start from).
        weights: the file, in the backup folder, of the model's and optimizer's weights after it.
        history: the run's epoch records so far.
        steps: optimizer steps so far.
        wall_time_s: seconds of training so far, over every process the run has had.
        best: the best validation epoch so far (its weights not loaded), with keep_best.
        best_file: the file, in the backup folder, of the best epoch's weights.
    """

    epoch: int
    weights: str
    history: list[dict]
    steps: int
    wall_time_s: float
    best: BestEpoch | None = None
    best_file: str | None = None

    def to_json(self) -> dict:
        # "batch" is Keras' own BackupAndRestore field: a backup resumes at an epoch's start, batch 0.
        best = {"file": self.best_file, "record": self.best.to_json()} if self.best is not None else None
        return {"epoch": self.epoch, "batch": 0, "weights": self.weights, "history": self.history,
                "steps": self.steps, "wall_time_s": self.wall_time_s, "best": best}

    @classmethod
    def from_json(cls, meta: dict) -> BackupMetadata:
        best = meta.get("best")
        return cls(epoch=int(meta["epoch"]), weights=meta["weights"], history=list(meta["history"]),
                   steps=meta["steps"], wall_time_s=meta["wall_time_s"],
                   best=BestEpoch.from_json(best["record"], []) if best else None,
                   best_file=best["file"] if best else None)


@dataclass
class FitState:
    """One fit call's state, shared by its callbacks (the recorder in explorer.training.fitting, the backup) and read
    when the fit ends. A backup restores the part it saved (steps, wall time, epoch, best); the clock
    readings are time.perf_counter's in this process.
    """

    steps: int = 0                     # optimizer steps, restored ones included
    epoch: int = 0                     # epochs completed, restored ones included
    wall_before: float = 0.0           # seconds of training in the run's earlier processes (a backup's)
    stopped_by: str | None = None      # "max_steps", "max_seconds" or "time_limit" when a limit ended the run
    cancelled: bool = False
    best: BestEpoch | None = None      # with keep_best
    start: float = 0.0                 # when training began in this process
    epoch_start: float = 0.0           # when the current epoch began
    current_epoch: int = 0             # the current epoch, from 0
    last_batch_end: float | None = None
    reported: float = -1.0             # seconds into training of the last batch event
    first_step_s: float | None = None  # the first step's seconds (tracing and compiling a new step included)
    first_step_epoch: int | None = None
    steps_s: float = 0.0               # seconds in training steps, over the epochs
    validation_s: float = 0.0          # seconds in validation and epoch-end callbacks, over the epochs

    def restore(self, saved: BackupMetadata, best_weights: list | None) -> None:
        """Takes up a backup's run: its steps, wall time and epochs, and its best epoch with `best_weights`."""
        self.steps, self.wall_before, self.epoch, self.stopped_by = saved.steps, saved.wall_time_s, saved.epoch, None
        if saved.best is not None:
            self.best = replace(saved.best, weights=list(best_weights))
