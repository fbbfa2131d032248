"""What the Trust tab asks, without the app: a pair's whole-set report, corruption table and faithfulness
report, each computed once per pair (named by the models' checkpoint identities) and set, or read from what
is shipped for the shipped pair. The UI and bench/trust_cost.py call this module."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from explorer.analysis import corruptions, faithfulness, trust


def _digests(models) -> list[str]:
    return [corruptions.weights_digest(m.folder) for m in models]


@dataclass
class TrustService:
    """Caches of the three reports, keyed on the models' identities (workbench.LoadedModel.identity)."""

    reports: trust.ReportCache = field(default_factory=trust.ReportCache)
    tables: trust.ReportCache = field(default_factory=trust.ReportCache)
    faithful: trust.ReportCache = field(default_factory=trust.ReportCache)
    # A model's own part of any faithfulness report computed here, by its identity: what the Attention and
    # Evidence tabs show beside its maps (with the report's dataset and image count).
    by_model: trust.ReportCache = field(default_factory=lambda: trust.ReportCache(64))
    digests: trust.ReportCache = field(default_factory=lambda: trust.ReportCache(64))  # identity -> weights' SHA-256

    def report(self, models, data: trust.LabelledSet, progress=None) -> tuple[trust.TrustReport, bool]:
        """(the pair's report on `data`, whether it came from the cache)."""
        key = (tuple(m.identity for m in models), data.key)
        found = self.reports.get(key)
        if found is not None:
            return found, True
        report = trust.trust_pair(models, data, progress=progress)
        self.reports.put(key, report)
        return report, False

    def corruption_table(self, models, images: np.ndarray, labels: np.ndarray, dataset: str,
                         progress=None) -> tuple[corruptions.CorruptionTable, str]:
        """(the table, where it came from: "shipped", "cache" or "computed"); the shipped table serves only
        the exact pair it was computed for, on the same number of images."""
        table = corruptions.shipped(_digests(models))
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
        report = faithfulness.shipped(_digests(models))
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
            digest = self.digests.get(model.identity)
            if digest is None:
                digest = corruptions.weights_digest(model.folder)
                self.digests.put(model.identity, digest)
            found = faithfulness.shipped_for(digest)
        return found
