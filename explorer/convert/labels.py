"""Class names: a labels file of the repo or folder, else CIFAR-100's or CIFAR-10's, else numbered."""

from __future__ import annotations

import json
from pathlib import Path

from explorer.convert.source import ConvertError

# The example trains on CIFAR-100; its models name no classes.
CIFAR100_CLASSES = (
    "apple", "aquarium_fish", "baby", "bear", "beaver", "bed", "bee", "beetle", "bicycle", "bottle", "bowl", "boy",
    "bridge", "bus", "butterfly", "camel", "can", "castle", "caterpillar", "cattle", "chair", "chimpanzee", "clock",
    "cloud", "cockroach", "couch", "crab", "crocodile", "cup", "dinosaur", "dolphin", "elephant", "flatfish",
    "forest", "fox", "girl", "hamster", "house", "kangaroo", "keyboard", "lamp", "lawn_mower", "leopard", "lion",
    "lizard", "lobster", "man", "maple_tree", "motorcycle", "mountain", "mouse", "mushroom", "oak_tree", "orange",
    "orchid", "otter", "palm_tree", "pear", "pickup_truck", "pine_tree", "plain", "plate", "poppy", "porcupine",
    "possum", "rabbit", "raccoon", "ray", "road", "rocket", "rose", "sea", "seal", "shark", "shrew", "skunk",
    "skyscraper", "snail", "snake", "spider", "squirrel", "streetcar", "sunflower", "sweet_pepper", "table",
    "tank", "telephone", "television", "tiger", "tractor", "train", "trout", "tulip", "turtle", "wardrobe",
    "whale", "willow_tree", "wolf", "woman", "worm")
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

# Files a repo or folder may name its classes in: one name a line, a JSON list, or a JSON object.
LABEL_FILES = ("labels.txt", "classes.txt", "class_names.txt", "labels.json", "classes.json", "class_names.json",
               "config.json")


def _names_from(path: Path) -> list[str] | None:
    if path.suffix == ".txt":
        names = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
        return names or None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if isinstance(data, dict):
        for key in ("class_names", "labels", "classes", "id2label"):
            if key in data:
                data = data[key]
                break
        else:
            return None
    if isinstance(data, dict):  # {"0": "apple", ...}
        try:
            return [str(data[k]) for k in sorted(data, key=lambda k: int(k))]
        except ValueError:
            return None
    if isinstance(data, list) and all(isinstance(n, (str, int, float)) for n in data):
        return [str(n) for n in data]
    return None


def class_names_for(folder: Path | None, num_classes: int) -> tuple[list[str], bool, str]:
    """(class names, assumed?, where they came from): a labels file of the repo or folder, else CIFAR-100's or
    CIFAR-10's for 100 or 10 outputs, else "class i"."""
    if folder is not None:
        for name in LABEL_FILES:
            path = folder / name
            if path.is_file():
                names = _names_from(path)
                if names is None:
                    continue
                if len(names) != num_classes:
                    raise ConvertError(f"{name} names {len(names)} classes; the model has {num_classes} outputs")
                return names, False, name
    if num_classes == 100:
        return list(CIFAR100_CLASSES), True, "CIFAR-100's fine labels (the example's dataset)"
    if num_classes == 10:
        return list(CIFAR10_CLASSES), True, "CIFAR-10's labels"
    return [f"class {i}" for i in range(num_classes)], True, "numbered: the source names none"
