"""What the Trust tab asks, without the app: a pair's whole-set report, corruption table and faithfulness
report, each computed once per pair (named by the models' checkpoint identities) and set, or read from what
is shipped for the shipped pair. The UI and bench/trust_cost.py call this module."""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from explorer.analysis import corruptions, faithfulness, render_trust, trust

# What a measure costs, before it has run: seconds per image and model per million parameters, and seconds to
# corrupt one image once, measured on a loaded 2-core host (bench/trust_cost.py; docs/trust.md, "What each
# measure costs"). Once a pair's whole-set report has run here, its own measured rate replaces the first.
SECONDS_PER_IMAGE_MPARAM = 0.008
CORRUPT_SECONDS = 0.0055
PATIENCE = 90.0  # seconds: what a computed corruption table's default image count is sized to on a CPU Space
CORRUPTION_COUNTS = (100, 1000)  # the default image count's range (a multiple of 100)
# faithfulness.csv's header: the columns of FaithfulnessReport.rows().
FAITH_COLUMNS = ["model", "map", "deletion AUC (lower is better)", "insertion AUC (higher is better)",
                 "rank corr. after head re-init", "rank corr. after all re-init"]


def forward_passes(config, count: int = faithfulness.IMAGES,
                   randomised: int = faithfulness.RANDOMISATION_IMAGES) -> int:
    """Images one model sees in a faithfulness report: per image, the clean maps and occlusion (one pass per
    patch), then a curve per kind of map and mode; per randomised image, the maps again at every stage (the
    head, each block, the embedding) and once trained."""
    patches = config.grid_size ** 2
    maps = patches + 1
    curve = len(faithfulness.curve_fractions(patches)) * 2 * len(faithfulness.KINDS)
    return count * (maps + curve) + randomised * maps * (config.num_layers + 3)


@dataclass(frozen=True)
class Cost:
    """What a measure will cost for a pair: seconds, and whether the rate behind them was measured here."""

    seconds: float
    measured: bool


@dataclass
class Eta:
    """Time left in a job, from its measured rate: `left(fraction)` is the seconds still to go, extrapolated
    from the time since the job began (None before any of it is done)."""

    began: float = field(default_factory=time.perf_counter)

    def left(self, fraction: float, now: float | None = None) -> float | None:
        elapsed = (time.perf_counter() if now is None else now) - self.began
        if fraction <= 0 or elapsed <= 0:
            return None
        return elapsed * (1 - min(fraction, 1.0)) / fraction


@dataclass
class TrustService:
    """Caches of the three reports, keyed on the models' identities (models.LoadedModel.identity), and
    each report shown as files to download, each set in a new folder under `downloads` (default: a new
    temporary folder)."""

    downloads: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="explorer-downloads-")))

    reports: trust.ReportCache = field(default_factory=trust.ReportCache)
    tables: trust.ReportCache = field(default_factory=trust.ReportCache)
    faithful: trust.ReportCache = field(default_factory=trust.ReportCache)
    # A model's own part of any faithfulness report computed here, by its identity: what the Attention and
    # Evidence tabs show beside its maps (with the report's dataset and image count).
    by_model: trust.ReportCache = field(default_factory=lambda: trust.ReportCache(64))
    digests: trust.ReportCache = field(default_factory=lambda: trust.ReportCache(64))  # identity -> weights' SHA-256
    # Seconds per image and model, measured by a whole-set report computed here, by the pair's identities.
    rates: trust.ReportCache = field(default_factory=lambda: trust.ReportCache(64))

    def report(self, models, data: trust.LabelledSet, progress=None) -> tuple[trust.TrustReport, bool]:
        """(the pair's report on `data`, whether it came from the cache)."""
        key = (tuple(m.identity for m in models), data.key)
        found = self.reports.get(key)
        if found is not None:
            return found, True
        known = [trust.shipped_logits(self.digest(m), data) for m in models]
        began = time.perf_counter()
        report = trust.trust_pair(models, data, progress=progress, logits=known)
        if all(k is None for k in known):  # a rate only where every model ran
            self.rates.put(key[0], (time.perf_counter() - began) / max(1, len(models) * len(data.labels)))
        self.reports.put(key, report)
        return report, False

    def corruption_table(self, models, images: np.ndarray, labels: np.ndarray, dataset: str,
                         progress=None) -> tuple[corruptions.CorruptionTable, str]:
        """(the table, where it came from: "shipped", "cache" or "computed"); the shipped table serves only
        the exact pair it was computed for, on the same number of images."""
        table = corruptions.shipped([self.digest(m) for m in models])
        if table is not None and table.count == len(labels):
            return table, "shipped"
        key = (tuple(m.identity for m in models), trust.LabelledSet(dataset, images, labels, [], np.arange(0)).key)
        found = self.tables.get(key)
        if found is not None:
            return found, "cache"
        table = corruptions.corruption_table(models, images, labels, dataset, names=[m.label for m in models],
                                             progress=progress)
        self.tables.put(key, table)
        return table, "computed"

    def faithfulness(self, models, images: np.ndarray, dataset: str, count: int = faithfulness.IMAGES,
                     progress=None) -> tuple[faithfulness.FaithfulnessReport, str]:
        report = faithfulness.shipped([self.digest(m) for m in models])
        if report is not None and report.count == min(count, len(images)):
            return report, "shipped"
        key = (tuple(m.identity for m in models), count, dataset)
        found = self.faithful.get(key)
        if found is not None:
            return found, "cache"
        report = faithfulness.faithfulness_report(models, images, count=count, dataset=dataset, progress=progress)
        self.faithful.put(key, report)
        for model, measured in zip(models, report.models, strict=True):
            self.by_model.put(model.identity, (measured, report.dataset, report.count))
        return report, "computed"

    def measured(self, model) -> tuple[faithfulness.ModelFaithfulness, str, int] | None:
        """How faithful `model`'s maps measured, if they have been: (its curves and areas, on what, on how
        many images), from a report computed here or the shipped one; None when never measured."""
        found = self.by_model.get(model.identity)
        if found is None:
            found = faithfulness.shipped_for(self.digest(model))
        return found

    def digest(self, model) -> str:
        """The weights' SHA-256 of `model`, read once per identity."""
        digest = self.digests.get(model.identity)
        if digest is None:
            digest = corruptions.weights_digest(model.folder)
            self.digests.put(model.identity, digest)
        return digest

    def shipped(self, models) -> tuple[corruptions.CorruptionTable | None, faithfulness.FaithfulnessReport | None]:
        """The corruption table and the faithfulness report shipped for exactly this pair (A, B), if any."""
        digests = [self.digest(m) for m in models]
        return corruptions.shipped(digests), faithfulness.shipped(digests)

    def rate(self, models) -> Cost:
        """Seconds per image and model for this pair: measured by its whole-set report here, else the constant
        per million parameters (the larger model's)."""
        measured = self.rates.get(tuple(m.identity for m in models))
        if measured is not None:
            return Cost(measured, True)
        params = max(_parameters(m) for m in models)
        return Cost(SECONDS_PER_IMAGE_MPARAM * params / 1e6, False)

    def report_cost(self, models, count: int) -> Cost:
        r = self.rate(models)
        return Cost(r.seconds * count * len(models), r.measured)

    def corruption_cost(self, models, count: int) -> Cost:
        """The clean set and 15 corruptions x 5 severities, each generated once and shown to every model."""
        r = self.rate(models)
        settings = len(corruptions.CORRUPTIONS) * len(corruptions.SEVERITIES)
        per_image = (settings + 1) * len(models) * r.seconds + settings * CORRUPT_SECONDS
        return Cost(per_image * count, r.measured)

    def corruption_count(self, models) -> int:
        """The image count a computed corruption table defaults to: what fits PATIENCE, in hundreds."""
        per_image = self.corruption_cost(models, 1).seconds
        low, high = CORRUPTION_COUNTS
        return int(min(high, max(low, math.floor(PATIENCE / max(per_image, 1e-9) / 100) * 100)))

    def faithfulness_cost(self, models) -> Cost:
        r = self.rate(models)
        return Cost(sum(r.seconds * forward_passes(m.config) for m in models), r.measured)

    def report_files(self, report: trust.TrustReport, pictures: dict, cards: dict[str, dict]) -> list[str]:
        """A whole-set report as files: trust.json, the confusion CSVs, `pictures` as PNG, the models' cards."""
        return render_trust.write_files(self._folder("trust-"), report.summary(), pictures, cards=cards)

    def corruption_files(self, table: corruptions.CorruptionTable, picture, cards: dict[str, dict]) -> list[str]:
        """A corruption table as files: corruptions.csv (each severity's and the mean accuracy, each model's
        CE), its figure as PNG, the models' cards."""
        header = (["corruption"] + [f"{t} s{s}" for t in "AB" for s in [*table.severities, "mean"]]
                  + ["A CE", "B CE"])
        return render_trust.write_files(self._folder("corruptions-"), None, {"corruptions": picture}, cards=cards,
                                        corruption_rows=table.rows(), corruption_header=header)

    def faithfulness_files(self, report: faithfulness.FaithfulnessReport, picture,
                           cards: dict[str, dict]) -> list[str]:
        """A faithfulness report as files: faithfulness.csv, its figure as PNG, the models' cards."""
        return render_trust.write_files(self._folder("faithfulness-"), None, {"faithfulness": picture},
                                        faithfulness_rows=report.rows(), faithfulness_header=FAITH_COLUMNS,
                                        cards=cards)

    def _folder(self, prefix: str) -> str:
        self.downloads.mkdir(parents=True, exist_ok=True)
        return tempfile.mkdtemp(prefix=prefix, dir=self.downloads)


def _parameters(model) -> int:
    keras_model = getattr(model, "model", model)
    return int(keras_model.count_params())
