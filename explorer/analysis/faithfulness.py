"""Which map to trust: deletion and insertion curves of each kind of map (Petsiuk et al. 2018, RISE), and the
randomisation sanity check (Adebayo et al. 2018), for explorer ViTs.

Maps (one value per patch, of one image): attention rollout (the last layer's cumulative rollout averaged
over query tokens, explorer.model.probe.rollout), last-layer attention (the attention each patch receives in the
last block, averaged over heads and queries), occlusion (explorer.analysis.evidence, one patch filled with the
image's mean colour at a time, the drop of the model's top-1 probability) and a random ranking (a seeded
permutation: the floor every map should beat).

Deletion: the patches are filled with the image's mean colour, STEP at a time, in the order the map ranks
them (highest first); the curve is the probability of the model's top-1 on the clean image after each step,
and its area (x from 0 to 1, the share of patches removed) is low for a faithful map. Insertion: from a
blurred copy (Gaussian, sigma one patch side), the patches are put back in the same order; its area is high
for a faithful map. Occlusion ranks patches by the very quantity deletion measures one patch at a time, so
it has an advantage by construction on deletion; attention maps are class-agnostic.

Randomisation: the model's layers are re-initialised from the top down (the head, then each block from the
last, then the patch embedding), cumulatively, with the initialisers of a freshly built model of the same
config; after each stage each map is computed again (occlusion for the class the trained model chose) and
compared with the trained model's map by Spearman rank correlation over patches, averaged over the images.
A map that stays close to 1 as the layers it should depend on are randomised does not explain the model.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import keras
import numpy as np

from explorer.analysis.corruptions import shipped_files
from explorer.analysis.evidence import Classifier, fill_image, occlusion_batch, window_masks
from explorer.model.config import ViTConfig
from explorer.model.models import build_vit
from explorer.model.probe import Probe, rollout

KINDS = ("rollout", "last-layer attention", "occlusion", "random")
STEP = 4          # patches removed (or put back) per step of a curve
SEED = 0
SHIPPED = Path(__file__).resolve().parents[1] / "shipped" / "faithfulness.json"
IMAGES = 32       # the fixed set: the first IMAGES test images
RANDOMISATION_IMAGES = 8
CHUNK = 64        # images per probe call


def _probe_chunks(probe, images: np.ndarray):
    for start in range(0, len(images), CHUNK):
        yield probe(images[start:start + CHUNK])


def attention_maps(probe, images: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rollout, last-layer attention, clean probabilities): (N, patches), (N, patches), (N, classes)."""
    rolled, last, probs = [], [], []
    for result in _probe_chunks(probe, images):
        _, cumulative = rollout(result.attention)
        rolled.append(cumulative[:, -1].mean(-2))
        last.append(result.attention[:, -1].mean(1).mean(-2))
        probs.append(result.probabilities)
    return np.concatenate(rolled), np.concatenate(last), np.concatenate(probs)


def maps(probe, images: np.ndarray, seed: int = SEED, target=None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every kind of map for each image ({kind: (N, patches)}) and the classes measured: each image's top-1
    (or `target`, one class per image, for occlusion)."""
    rolled, last, probs = attention_maps(probe, images)
    classes = probs.argmax(-1) if target is None else np.asarray(target, np.int64)
    occluded = occlusion_batch(probe, images, target=classes)
    rng = np.random.default_rng(seed)
    return ({"rollout": rolled, "last-layer attention": last,
             "occlusion": np.stack([o.drop.ravel() for o in occluded]),
             "random": rng.random(rolled.shape)}, classes)


def curve_fractions(patches: int, step: int = STEP) -> np.ndarray:
    counts = np.unique(np.r_[np.arange(0, patches, step), patches])
    return counts / patches


def curves(model, images: np.ndarray, ranking: np.ndarray, classes: np.ndarray, mode: str,
           step: int = STEP) -> np.ndarray:
    """(N, steps + 1) the probability of each image's class as patches are deleted ("deletion") or put back
    ("insertion") in the order of `ranking` (N, patches), highest first."""
    if mode not in ("deletion", "insertion"):
        raise ValueError(f"mode must be 'deletion' or 'insertion', got {mode!r}")
    m = Classifier(model)
    x = m.check(images)
    geo = m.geometry
    masks = window_masks(geo, 1)  # (patches, H, W)
    patches = len(masks)
    counts = np.rint(curve_fractions(patches, step) * patches).astype(int)
    out = np.empty((len(x), len(counts)))
    per_call = max(1, 1024 // len(counts))
    for start in range(0, len(x), per_call):
        chunk = x[start:start + per_call]
        batch = np.empty((len(chunk), len(counts)) + chunk.shape[1:], np.float32)
        for j, image in enumerate(chunk):
            order = np.argsort(-ranking[start + j], kind="stable")
            if mode == "deletion":
                source, canvas = image, fill_image(image, "mean")
            else:
                source, canvas = fill_image(image, "blur", None, geo.pixels_per_patch), image
            # After k steps the first counts[k] patches of the order show the canvas.
            covered = np.zeros((len(counts), patches), bool)
            for k, n in enumerate(counts):
                covered[k, order[:n]] = True
            pixel = (covered.astype(np.float32) @ masks.reshape(patches, -1).astype(np.float32)).reshape(
                len(counts), *image.shape[:2], 1) > 0
            batch[j] = np.where(pixel, canvas[None], source[None])
        probs = m.probabilities(batch.reshape(-1, *chunk.shape[1:])).reshape(len(chunk), len(counts), -1)
        out[start:start + len(chunk)] = probs[np.arange(len(chunk)), :, classes[start:start + len(chunk)]]
    return out


def auc(curve: np.ndarray, fractions: np.ndarray) -> np.ndarray:
    """Area under each curve over x = fractions (0..1), trapezoids."""
    y = np.asarray(curve)
    return ((y[..., 1:] + y[..., :-1]) / 2 * np.diff(fractions)).sum(-1)


def spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman rank correlation of each row of a with the same row of b (ties ranked by position); 0 for a
    constant row."""
    def ranks(x):
        return np.argsort(np.argsort(x, axis=-1, kind="stable"), axis=-1).astype(np.float64)
    ra, rb = ranks(np.asarray(a)), ranks(np.asarray(b))
    ra -= ra.mean(-1, keepdims=True)
    rb -= rb.mean(-1, keepdims=True)
    num = (ra * rb).sum(-1)
    den = np.sqrt((ra * ra).sum(-1) * (rb * rb).sum(-1))
    constant = (np.ptp(a, axis=-1) == 0) | (np.ptp(b, axis=-1) == 0)
    return np.where(constant | (den == 0), 0.0, num / np.where(den == 0, 1, den))


@dataclass
class ModelFaithfulness:
    """One model's curves and their areas, per kind of map; and its randomisation check.

    Attributes:
        deletion, insertion: {kind: (steps + 1,) mean curve over the images}.
        deletion_auc, insertion_auc: {kind: mean area}; deletion_sd, insertion_sd: their standard deviations.
        stages: the randomisation's cumulative stages ("head", "block5", ..., "embedding").
        rank_correlation: {kind: (stages,) mean Spearman correlation with the trained model's map}.
    """

    name: str
    deletion: dict[str, list[float]]
    insertion: dict[str, list[float]]
    deletion_auc: dict[str, float]
    insertion_auc: dict[str, float]
    deletion_sd: dict[str, float]
    insertion_sd: dict[str, float]
    stages: list[str] = field(default_factory=list)
    rank_correlation: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class FaithfulnessReport:
    models: list[ModelFaithfulness]
    dataset: str
    count: int
    randomisation_count: int
    fractions: list[float]
    step: int = STEP
    seed: int = SEED
    weights: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"dataset": self.dataset, "count": self.count, "randomisation_count": self.randomisation_count,
                "fractions": self.fractions, "step": self.step, "seed": self.seed, "weights": self.weights,
                "models": [vars(m) for m in self.models]}

    @classmethod
    def from_json(cls, data: dict) -> FaithfulnessReport:
        return cls([ModelFaithfulness(**m) for m in data["models"]], data["dataset"], int(data["count"]),
                   int(data["randomisation_count"]), list(data["fractions"]), int(data["step"]), int(data["seed"]),
                   list(data.get("weights", [])))

    def rows(self) -> list[list]:
        """One row per model and kind: deletion AUC (lower is more faithful), insertion AUC (higher is), and
        the rank correlation after the head and after every layer is re-initialised."""
        out = []
        for m in self.models:
            for kind in KINDS:
                rc = m.rank_correlation.get(kind)
                out.append([m.name, kind, m.deletion_auc[kind], m.insertion_auc[kind],
                            rc[0] if rc else None, rc[-1] if rc else None])
        return out


def stages(model) -> list[tuple[str, list[str]]]:
    """The randomisation's stages, top down: (name, the layers it re-initialises)."""
    names = [layer.name for layer in model.layers if layer.weights]
    blocks = sorted({int(n[5:].split("_")[0]) for n in names if n.startswith("block")}, reverse=True)
    out = [("head", [n for n in names if n.startswith("head") or n == "final_norm"])]
    out += [(f"block{b}", [n for n in names if n.startswith(f"block{b}_")]) for b in blocks]
    out.append(("embedding", [n for n in names if n in ("tokenizer", "position")]))
    return out


def randomisation(model, config, images: np.ndarray, seed: int = SEED, progress=None) -> tuple[list[str], dict]:
    """(stage names, {kind: (stages,) mean Spearman correlation}) for a trained explorer ViT; see the module."""
    keras_model = getattr(model, "model", model)
    num_classes = int(keras_model.output_shape[-1])
    scratch = build_vit(config, num_classes, name=f"{keras_model.name}_randomised")
    scratch.set_weights(keras_model.get_weights())
    # Seeded, so that the check repeats: a shipped table and a recompute draw the same re-initialisation.
    keras.utils.set_random_seed(seed)
    fresh = build_vit(config, num_classes, name=f"{keras_model.name}_fresh")
    probe = Probe(scratch, config)
    base, classes = maps(probe, images, seed)
    plan = stages(scratch)
    out = {kind: [] for kind in KINDS if kind != "random"}
    for i, (_, layers) in enumerate(plan):
        for name in layers:
            scratch.get_layer(name).set_weights(fresh.get_layer(name).get_weights())
        now, _ = maps(probe, images, seed, target=classes)
        for kind in out:
            out[kind].append(float(spearman(base[kind], now[kind]).mean()))
        if progress is not None:
            progress((i + 1) / len(plan), f"randomised down to {plan[i][0]}")
    return [name for name, _ in plan], out


def model_faithfulness(probe, images: np.ndarray, name: str, config=None, randomisation_images: int = 0,
                       seed: int = SEED, step: int = STEP, progress=None) -> ModelFaithfulness:
    """Deletion and insertion curves of every kind of map over `images`; with a config and
    randomisation_images > 0, the randomisation check on the first that many."""
    found, classes = maps(probe, images, seed)
    patches = found["rollout"].shape[-1]
    fractions = curve_fractions(patches, step)
    result = ModelFaithfulness(name, {}, {}, {}, {}, {}, {})
    for k, kind in enumerate(KINDS):
        for mode, curves_of, areas, sds in (("deletion", result.deletion, result.deletion_auc, result.deletion_sd),
                                            ("insertion", result.insertion, result.insertion_auc,
                                             result.insertion_sd)):
            c = curves(probe, images, found[kind], classes, mode, step)
            a = auc(c, fractions)
            curves_of[kind] = c.mean(0).tolist()
            areas[kind] = float(a.mean())
            sds[kind] = float(a.std())
        if progress is not None:
            progress((k + 1) / (len(KINDS) + (1 if randomisation_images else 0)), f"{name}: {kind} curves")
    if config is not None and randomisation_images:
        result.stages, result.rank_correlation = randomisation(probe.model, config, images[:randomisation_images],
                                                               seed)
    return result


def faithfulness_report(pairs, images: np.ndarray, names=None, count: int = IMAGES,
                        randomisation_count: int = RANDOMISATION_IMAGES, dataset: str = "", seed: int = SEED,
                        progress=None) -> FaithfulnessReport:
    """The report for several models, each given as (keras model, Card) or a models.LoadedModel, on the
    first `count` images."""
    images = np.asarray(images[:count])
    out = []
    for i, item in enumerate(pairs):
        if hasattr(item, "probe"):
            probe, config, name = item.probe, item.config, item.label
        else:
            model, card = item
            config = ViTConfig.from_dict(card.config)
            probe, name = Probe(model, config), card.name
        name = names[i] if names else name

        def step(f, message, i=i):
            if progress is not None:
                progress((i + f) / len(pairs), message)
        out.append(model_faithfulness(probe, images, name, config, randomisation_count, seed, STEP, step))
    fractions = curve_fractions(probe.config.grid_size ** 2, STEP)
    return FaithfulnessReport(out, dataset or f"the first {len(images)} test images", len(images),
                              min(randomisation_count, len(images)), fractions.tolist(), STEP, seed)


@functools.lru_cache(maxsize=4)
def _read_shipped(path: str) -> FaithfulnessReport | None:
    """The shipped report at `path`, read once (it ships with the app and does not change while it runs)."""
    try:
        return FaithfulnessReport.from_json(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _shipped_reports(path: str | Path | None) -> list[FaithfulnessReport]:
    files = [Path(path)] if path is not None else shipped_files("faithfulness")
    return [report for report in map(_read_shipped, map(str, files)) if report is not None]


def shipped_for(digest: str, path: str | Path | None = None) -> tuple[ModelFaithfulness, str, int] | None:
    """One model's part of a shipped report (its areas, the report's dataset and image count), when
    `digest` is the weights' SHA-256 of one of the models it was computed for; else None."""
    for report in _shipped_reports(path):
        if digest and digest in report.weights:
            return report.models[report.weights.index(digest)], report.dataset, report.count
    return None


# What a reader calls each kind of map beside the picture that shows it.
SHOWN_AS = {"rollout": "attention rollout", "last-layer attention": "last-layer attention (mean of heads)",
            "occlusion": "occlusion", "random": "a random ranking (for scale)"}


def note(measured: list, kinds: tuple[str, ...], where: str = "") -> str:
    """Markdown beside a picture of maps: how faithful each of `kinds` measured for each model, with the
    random ranking for scale. `measured`: per model, (tag, label, (ModelFaithfulness, dataset, count) or
    None); `where`: how to measure a model not measured yet."""
    done = [(tag, m) for tag, _, m in measured if m is not None]
    lines = []
    if done:
        dataset, count = done[0][1][1], done[0][1][2]
        over = dataset if str(count) in dataset else f"the first {count} {dataset} test images"
        # A row per map and model, four columns: in an 800 px window every header keeps its words whole.
        lines += [f"**How faithful these maps measured** (deletion and insertion areas over {over}; "
                  f"docs/trust.md):", "", "| map | model | deletion ↓ | insertion ↑ |", "|---|---|---:|---:|"]
        for kind in (*kinds, "random"):
            lines += [f"| {SHOWN_AS[kind]} | {tag} | {m[0].deletion_auc[kind]:.3f} | {m[0].insertion_auc[kind]:.3f} |"
                      for tag, m in done]
        verdicts: dict[str, list[str]] = {}
        for tag, m in done:
            better = [SHOWN_AS[k] for k in kinds if m[0].deletion_auc[k] < m[0].deletion_auc["random"]
                      and m[0].insertion_auc[k] > m[0].insertion_auc["random"]]
            worse = [SHOWN_AS[k] for k in kinds if SHOWN_AS[k] not in better]
            verdict = ((f"{' and '.join(better)} beat{'s' if len(better) == 1 else ''} a random ranking on both "
                        f"curves" if better else "") + ("; " if better and worse else "")
                       + (f"{' and '.join(worse)} not on both: read {'it' if len(worse) == 1 else 'them'} with "
                          f"care" if worse else "") + ".")
            verdicts.setdefault(verdict, []).append(tag)
        for verdict, tags in verdicts.items():
            lines += ["", f"{' and '.join(tags)}: {verdict}"]
    missing = [f"{tag}: {label}" for tag, label, m in measured if m is None]
    if missing:
        lines += ["", f"_How faithful the maps are is not measured yet for {'; '.join(missing)}."
                      + (f" {where[0].upper()}{where[1:]}." if where else "") + "_"]
    return "\n".join(lines).strip()


def shipped(digests: list[str], path: str | Path | None = None) -> FaithfulnessReport | None:
    """The report computed once for a shipped pair, when `digests` are its weights'; else None."""
    return next((report for report in _shipped_reports(path) if list(digests) == report.weights), None)
