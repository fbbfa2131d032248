"""The Hub's model card (a checkpoint's README.md), written from its card (explorer.core.card.Card) by the
checkpoint store: front matter, the scores, how it was trained (stages, GPU windows, fine-tuning), its source,
its history and how to use it."""

from __future__ import annotations

from explorer.core.card import CARD, Card, Stage, Start


def describe_augmentation(recipe: dict) -> str:
    """A training recipe's augmentation in words, e.g. "crop + flip, CutMix 1.0 / mixup 0.2 on 50 % of batches"."""
    parts = ["crop + flip"] if recipe.get("augment") else []
    mixes = [f"{name} {recipe[key]:g}" for name, key in (("CutMix", "cutmix_alpha"), ("mixup", "mixup_alpha"))
             if recipe.get(key)]
    if mixes:
        prob = recipe.get("mix_prob", 1.0)
        parts.append(" / ".join(mixes) + ("" if prob >= 1 else f" on {100 * prob:.0f} % of batches"))
    if recipe.get("randaugment"):
        parts.append(f"RandAugment {recipe['randaugment']:g}")
    if recipe.get("autoaugment"):
        parts.append("AutoAugment's CIFAR-10 policy")
    if recipe.get("random_erasing"):
        parts.append(f"random erasing on {100 * recipe['random_erasing']:.0f} % of images")
    if (recipe.get("repeats") or 1) > 1:
        parts.append(f"each image {recipe['repeats']} times an epoch")
    return ", ".join(parts) or "none"


def _front_matter(card: Card) -> list[str]:
    name = card.dataset.name
    lines = ["---", "library_name: keras", "license: apache-2.0", "pipeline_tag: image-classification",
             "tags:", "- vision-transformer", "- shifted-patch-tokenization",
             "- locality-self-attention", "- keras", f"datasets:\n- {'unknown' if name is None else name}"]
    if card.metrics.test_top1 is not None:
        lines += ["model-index:", f"- name: {card.name}", "  results:",
                  "  - task:", "      type: image-classification",
                  "    dataset:", f"      name: {name}", f"      type: {name}",
                  "    metrics:", "    - type: accuracy", f"      value: {card.metrics.test_top1:.4f}",
                  "      name: test top-1"]
    return lines + ["---"]


_SCORES = (("test_top1", "test top-1"), ("test_top5", "test top-5"),
           ("test_top1_flip", "test top-1, image + mirror averaged"), ("val_top1", "validation top-1"))
_RUN = (("epochs", "epochs", "{}"), ("epochs_trained", "epochs trained", "{}"),
        ("wall_time_s", "training wall time (s)", "{:.0f}"),
        ("images_per_second", "training images/s", "{:.0f}"), ("device", "device", "{}"))


def _summary(card: Card) -> list[str]:
    """The title, what the model is, and its table: data, scores, training run, size, recipe."""
    dataset, training = card.dataset, card.training
    lines = ["", f"# {card.name}", "",
             f"A **{card.variant}** Vision Transformer (preset `{card.preset}`) from the "
             "SPT/LSA ViT Explorer: Shifted Patch Tokenization and Locality Self-Attention "
             "([Lee, Lee & Song 2021](https://arxiv.org/abs/2112.13492)).", "",
             "| | |", "|---|---|",
             f"| dataset | {dataset.name} ({dataset.num_classes} classes) |"]
    if dataset.note:
        lines.append(f"| data note | {dataset.note} |")
    lines += [f"| {label} | {100 * getattr(card.metrics, key):.2f} % |" for key, label in _SCORES
              if getattr(card.metrics, key) is not None]
    lines += [f"| {label} | {fmt.format(getattr(training, key))} |" for key, label, fmt in _RUN
              if getattr(training, key) is not None]
    lines.append(f"| parameters | {card.parameters} |")
    recipe = training.recipe or {}
    if recipe.get("name"):  # a named recipe of explorer.train (--recipe)
        lines.append(f"| training recipe | `{recipe['name']}`: augmentation {describe_augmentation(recipe)} |")
    return lines


def _fine_tuning(card: Card) -> list[str]:
    """How a fine-tuned model was trained from its base (nothing for a continued or a new model)."""
    base, training = card.base, card.training
    if base is None or base.continued:
        return []
    r, start = training.recipe or {}, training.start or Start()
    at_start = (f" (validation top-1 {100 * start.val_top1:.1f} % before any step)"
                if isinstance(start.val_top1, (int, float)) else "")
    kept = training.kept_epoch
    batch = training.batch_size if training.batch_size is not None else r.get("batch_size")
    kept_text = (f"; the epoch kept, by validation top-1, was {kept}" + (" (the starting head)" if kept == 0 else "")
                 if r.get("keep_best") and kept is not None else "")
    if training.kept_model:
        kept_text = (f". {training.decision}" + (f" ({training.decision_detail})" if training.decision_detail else "")
                     ).rstrip(".")
    return ["", "## Fine-tuning", "",
            f"Fine-tuned from `{base.name}`. The classifier head started from "
            f"{'the base' if start.head is None else start.head}{at_start}; then "
            f"{'the head alone' if r.get('freeze_backbone') else 'the whole model'} trained for "
            f"{training.planned_epochs} epochs of batch {batch} "
            f"at a peak learning rate of {r.get('learning_rate')} (AdamW, weight decay {r.get('weight_decay')}, "
            f"warmup + cosine), on {training.device} at {training.images_per_second} images/s" + kept_text + "."]


def _stage_line(i: int, stage: Stage) -> str:
    r = stage.recipe or {}
    wall = stage.wall_time_s or 0
    took = f"{wall / 60:.0f} min" if wall >= 60 else f"{wall:.0f} s"
    plural = "" if stage.epochs == 1 else "s"
    return (f"- stage {i}: {stage.epochs} epoch{plural}, "
            f"peak learning rate {r.get('learning_rate')}, "
            f"warmup {100 * (r.get('warmup_fraction') or 0):.0f} %, "
            f"weight decay {r.get('weight_decay')}, batch {r.get('batch_size')}, "
            f"label smoothing {r.get('label_smoothing')}, augmentation {describe_augmentation(r)}, "
            f"seed {r.get('seed')}; {took} at {stage.images_per_second} images/s")


def _stages(card: Card) -> list[str]:
    """The stages of a run continued from its own checkpoints (nothing for a run of one stage)."""
    stages = card.training.stages or []
    if len(stages) <= 1:
        return []
    return ["", "## Training stages", "",
            "Each stage continued the previous one's weights on the same data and held-out split, "
            "with a fresh optimizer and its own warmup + cosine schedule:", "",
            *(_stage_line(i, stage) for i, stage in enumerate(stages, 1))]


def _windows(card: Card) -> list[str]:
    """The windows of a run trained in short GPU windows (nothing for a run of one process)."""
    windows = card.training.windows or []
    if not windows:
        return []
    devices = list(dict.fromkeys(w.device for w in windows if w.device))
    wall = sum(w.wall_s or 0 for w in windows)
    lines = ["", "## Training windows", "",
             f"Trained in {len(windows)} windows of a lent GPU ({', '.join(devices)}), {wall / 60:.1f} min in all, "
             "each resuming the previous one's backup exactly (`tools/window.py`):", ""]
    for w in windows:
        speed = f"{w.images_per_second:,.0f}" if w.images_per_second is not None else "?"
        lines.append(f"- window {w.window} ({(w.started or '')[:10]}, {w.device}): epochs {w.epochs_before} → "
                     f"{w.epochs_after} in {w.wall_s or 0:.0f} s at {speed} images/s (its first epoch compiling)")
    return lines


def _source(card: Card) -> list[str]:
    """Where a converted model came from and what was mapped (nothing for a model trained here)."""
    source = card.source
    if source is None or not source.source:
        return []
    revision = f" at revision `{source.revision}`" if source.revision else ""
    names = ("assumed: " if source.class_names_assumed else "from ") + str(source.class_names_from)
    return ["", "## Source", "",
            f"Converted by `python -m explorer.convert` from `{source.source}`{revision} "
            f"({source.format}), a model of the keras.io example "
            "[Train a Vision Transformer on small datasets](https://keras.io/examples/vision/vit_small_ds/). "
            f"Class names {names}. What was mapped:", "",
            *(f"- {item}" for item in source.mapped or []),
            *(f"- dropped: {item}" for item in source.dropped or [])]


def _number(value, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else "–"


def _history(card: Card) -> list[str]:
    """One table row per epoch: loss, top-1, validation top-1, learning rate and tau per layer."""
    if not card.history:
        return []
    lines = ["", "## Training history", "",
             "| epoch | loss | top-1 | val top-1 | learning rate | tau per layer |", "|---|---|---|---|---|---|"]
    for e in card.history:
        tau = "; ".join(", ".join(f"{v:.3f}" for v in layer) for layer in e.tau or []) or "–"
        cells = " | ".join(_number(v, ".4f") for v in (e.loss, e.top1, e.val_top1))
        lines.append(f"| {e.epoch} | {cells} | {_number(e.learning_rate, '.2e')} | {tau} |")
    return lines


def _how_to_use(card: Card) -> list[str]:
    name = card.name or "this-model"
    return ["", "## How to use", "",
            "Plain Keras loads this folder or its Hub repo once the SPT/LSA ViT Explorer's `explorer` "
            "package is importable (run from its repository, with its requirements.txt installed): "
            "`import explorer` registers the custom layers and the learning-rate schedule. The model "
            "takes raw 0-255 RGB pixels, "
            f"{(card.config or {}).get('image_size', 32)} px square, and returns logits over "
            f"`class_names` in `{CARD}`:", "",
            "```python", "import explorer  # registers the layers and the schedule", "import keras", "",
            f'model = keras.saving.load_model("checkpoints/{name}")        # a local folder',
            f'model = keras.saving.load_model("hf://your-name/{name}")   # or its Hub repo',
            "logits = model.predict(images)  # uint8 or float, (N, H, W, 3), values 0-255", "```", "",
            "In the explorer app, type the Hub id into a model slot: `your-name/" + name + "`, or "
            "`your-name/" + name + "@<revision>` for a branch, tag or commit (`hf://your-name/" + name +
            "` works too). `explorer.checkpoints.store.load_checkpoint(ref)` takes the same references and "
            "returns the model with this card; it loads with `safe_mode=True` and refuses layers that "
            "are not the explorer's.", ""]


def model_card(card: Card) -> str:
    """README.md for the Hub: front matter, then what the model is and how it did."""
    sections = (_front_matter, _summary, _fine_tuning, _stages, _windows, _source, _history, _how_to_use)
    return "\n".join(line for section in sections for line in section(card))
