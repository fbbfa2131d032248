"""CIFAR packed into one small file: every image a JPEG, all of them in one .npz, for a machine that takes
only a few tens of MiB (a GPU machine's upload). `load_dataset` reads such a file as the dataset it was
made from: `--dataset runs/cifar10-q90.npz` trains on CIFAR-10, and its card says so.

    python -m explorer.packed pack --data-dir ../shared/data --out runs/cifar10-q90.npz [--splits train]
    python -m explorer.packed check runs/cifar10-q90.npz [--data-dir ../shared/data]

The file is written by np.savez, uncompressed (JPEG bytes do not compress). It holds `header` (JSON: the
format and its version, the dataset, the JPEG settings, and per split the image count, its JPEG bytes, the
SHA-256 of the source pixels and the decoded pixels' mean absolute error against them), `class_names`, and
per split `<split>_prefix` (uint8: the JPEG header every image of the split shares, from its start through
the scan header: quantization and the standard Huffman tables, frame, scan), `<split>_jpeg` (each image's
entropy-coded data and end marker, end to end, uint8; image i is `prefix` + bytes offsets[i]:offsets[i + 1]),
`<split>_offsets` (N + 1 uint32) and `<split>_labels` (int16).

Version 1 stored each image as a whole JPEG with its own optimized Huffman tables (663 bytes an image of
CIFAR-10's training set at quality 90, 303 of them header); version 2 shares one header (427 bytes an image,
20.3 MiB for the 50,000 training images instead of 31.9), so that the images, a paper-scale training
backup (31 MiB) and the code travel together to a GPU machine that takes 64 MiB. Huffman coding is
lossless: both versions decode to the same pixels, bit for bit. Version 1 files still load.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from explorer.core import atomic
from explorer.data.datasets import Dataset, DatasetError, load_cifar

FORMAT = "explorer-packed-cifar"
VERSION = 2
READS = (1, 2)  # the versions this code loads (1: a whole JPEG per image, no shared prefix)
SPLITS = ("train", "test")
SUBSAMPLING = ("4:2:0", "4:4:4")
IMAGE_SHAPE = (32, 32, 3)
_TITLES = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100"}


@dataclass(frozen=True)
class Split:
    """One split as packed: `sha256` of the source's uint8 (N, 32, 32, 3) pixels in C order (as load_cifar
    returns them), `mae` of the decoded pixels against those, on the 0-255 scale, `decoded_sha256` of the
    decoded pixels (checked at every load)."""

    count: int
    jpeg_bytes: int
    sha256: str
    mae: float
    decoded_sha256: str = ""  # of the decoded pixels (version 2): damaged JPEG data can decode without an error


@dataclass(frozen=True)
class Header:
    """What a packed file says about itself; `splits` holds only the splits it packs."""

    dataset: str
    quality: int
    subsampling: str
    splits: dict[str, Split]
    source: str
    source_note: str = ""
    format: str = FORMAT
    version: int = VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str, path: Path) -> Header:
        try:
            fields = json.loads(text)
            found = fields.get("format") if isinstance(fields, dict) else None
        except ValueError as e:
            raise DatasetError(f"{path}: its header is not JSON ({e}); pack it again") from None
        if found != FORMAT:
            raise DatasetError(f"{path} is not a packed dataset: its header's format is {found!r}, "
                               f"not {FORMAT!r}")
        if fields.get("version") not in READS:
            raise DatasetError(f"{path} is version {fields.get('version')!r} of {FORMAT}; this code reads "
                               f"versions {' and '.join(map(str, READS))}: pack it again with this version, or "
                               f"update the code")
        try:
            splits = {name: Split(**split) for name, split in fields.pop("splits").items()}
            return cls(**fields, splits=splits)
        except (TypeError, AttributeError, KeyError) as e:
            raise DatasetError(f"{path}: its header lacks or has unknown fields ({e}); pack it again") from None

    @property
    def title(self) -> str:
        return _TITLES.get(self.dataset, self.dataset)


def _sha256(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).data).hexdigest()


def _mae(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b).mean()) if len(a) else 0.0


def encode(images: np.ndarray, quality: int = 90,
           subsampling: str = "4:2:0") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the header every image shares, the images' entropy-coded data end to end, N + 1 offsets), all but the
    offsets uint8, of uint8 (N, H, W, 3) images of one size. With the standard Huffman tables (not optimized
    per image) every JPEG begins with the same bytes through its scan header; they are kept once."""
    from PIL import Image
    prefix, blobs = None, []
    for i, image in enumerate(images):
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, "JPEG", quality=quality, subsampling=subsampling, optimize=False)
        data = buf.getvalue()
        end = _scan_data_start(data)
        if prefix is None:
            prefix = data[:end]
        elif data[:end] != prefix:  # the same size, quality and tables give the same header: never seen
            raise DatasetError(f"image {i:,}'s JPEG header differs from the first image's; cannot share it")
        blobs.append(data[end:])
    offsets = np.zeros(len(blobs) + 1, np.int64)
    np.cumsum([len(b) for b in blobs], out=offsets[1:])
    return np.frombuffer(prefix or b"", np.uint8), np.frombuffer(b"".join(blobs), np.uint8), offsets


def _scan_data_start(data: bytes) -> int:
    """Where a baseline JPEG's entropy-coded data begins: just after its (first) start-of-scan segment."""
    sos = data.find(b"\xff\xda")
    if sos < 0:
        raise DatasetError("PIL wrote a JPEG without a scan")
    return sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")


def decode(jpeg: np.ndarray, offsets: np.ndarray, where: str = "", prefix: np.ndarray | None = None) -> np.ndarray:
    """The uint8 (N, 32, 32, 3) images of `encode`'s output (`prefix` empty or None: whole JPEGs, version 1);
    a DatasetError names the first bad image."""
    from PIL import Image
    raw, bounds = jpeg.tobytes(), offsets.tolist()
    head = b"" if prefix is None else prefix.tobytes()
    out = np.empty((len(bounds) - 1, *IMAGE_SHAPE), np.uint8)
    for i in range(len(out)):
        try:
            with Image.open(io.BytesIO(head + raw[bounds[i]:bounds[i + 1]]), formats=["JPEG"]) as img:
                if img.size != IMAGE_SHAPE[1::-1] or img.mode != "RGB":  # checked before any pixel is decoded
                    raise ValueError(f"a {img.mode} image of {img.size[0]}x{img.size[1]} px, not RGB 32x32")
                out[i] = np.asarray(img)
        except Exception as e:  # cut short, not a JPEG, another size
            raise DatasetError(f"{where}image {i:,} cannot be decoded ({type(e).__name__}: {e})") from None
    return out


def pack(data_dir: str | os.PathLike | None, out_path: str | os.PathLike, quality: int = 90,
         splits: tuple[str, ...] = SPLITS, subsampling: str = "4:2:0", name: str = "cifar10") -> Header:
    """Writes the CIFAR folder's `splits` (read by load_cifar, no download) into one packed .npz; returns
    its header. The file appears whole or not at all."""
    out_path = Path(out_path)
    if out_path.suffix.lower() != ".npz":
        raise DatasetError(f"{out_path}: a packed file's name ends in .npz (that is how load_dataset knows it)")
    if not 1 <= quality <= 95:
        raise DatasetError(f"quality {quality} is outside 1..95 (above 95 the file grows for little gain)")
    if subsampling not in SUBSAMPLING:
        raise DatasetError(f"subsampling {subsampling!r}: choose one of {SUBSAMPLING}")
    splits = _check_splits(splits)
    ds = load_cifar(name, data_dir, download=False)
    arrays, packed = {"class_names": np.asarray(ds.class_names, dtype=str)}, {}
    for split in splits:
        x, y = (ds.x_train, ds.y_train) if split == "train" else (ds.x_test, ds.y_test)
        prefix, jpeg, offsets = encode(x, quality, subsampling)
        if len(jpeg) >= 2**32:
            raise DatasetError(f"the {split} split's {_mib(len(jpeg))} of JPEG are beyond this format's 4 GiB")
        decoded = decode(jpeg, offsets, f"{split}: ", prefix)
        packed[split] = Split(len(x), int(len(jpeg) + len(prefix)), _sha256(x), round(_mae(decoded, x), 4),
                              _sha256(decoded))
        arrays.update({f"{split}_prefix": prefix, f"{split}_jpeg": jpeg, f"{split}_offsets": offsets.astype(np.uint32),
                       f"{split}_labels": y.astype(np.int16)})
    header = Header(name, quality, subsampling, packed, ds.source, ds.note)
    arrays["header"] = np.asarray(header.to_json())
    try:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic.replacing(out_path) as tmp, open(tmp, "wb") as f:
            np.savez(f, **arrays)
    except OSError as e:
        raise DatasetError(f"cannot write {out_path} ({e.strerror or e})") from None
    return header


def _check_splits(splits) -> tuple[str, ...]:
    unknown = [s for s in splits if s not in SPLITS]
    if unknown or not splits:
        raise DatasetError(f"splits {','.join(splits) or '(none)'}: choose one or both of {','.join(SPLITS)}")
    return tuple(s for s in SPLITS if s in splits)


def read_packed(path: str | os.PathLike) -> tuple[Header, dict[str, np.ndarray]]:
    """The header and the arrays of a packed file, checked against each other; nothing decoded yet."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such file (make one with python -m explorer.packed pack)")
    try:
        z = np.load(path, allow_pickle=False)
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise DatasetError(f"{path} is a single .npy array, not a packed dataset")
        with z:
            if "header" not in z.files:
                raise DatasetError(f"{path} is not a packed dataset (python -m explorer.packed pack makes "
                                   f"them): it holds {', '.join(sorted(z.files)) or 'nothing'} and no header")
            header = Header.from_json(str(z["header"]), path)
            kinds = ("jpeg", "offsets", "labels") + (("prefix",) if header.version >= 2 else ())
            keys = ["class_names"] + [f"{s}_{k}" for s in header.splits for k in kinds]
            missing = [k for k in keys if k not in z.files]
            if missing:
                raise DatasetError(f"{path} lacks {', '.join(missing)}: pack it again")
            arrays = {k: z[k].astype(np.int64) if k.endswith(("_offsets", "_labels")) else z[k] for k in keys}
    except DatasetError:
        raise
    except Exception as e:  # truncated, not a zip, an array cut short
        raise DatasetError(f"{path} cannot be read ({type(e).__name__}: {e}): truncated or not an .npz; "
                           f"pack it again") from None
    for split, info in header.splits.items():
        jpeg, offsets, labels = (arrays[f"{split}_{k}"] for k in ("jpeg", "offsets", "labels"))
        prefix = arrays.setdefault(f"{split}_prefix", np.zeros(0, np.uint8))
        if (offsets.shape != (info.count + 1,) or labels.shape != (info.count,) or jpeg.dtype != np.uint8
                or jpeg.ndim != 1 or offsets[0] != 0 or offsets[-1] != len(jpeg) or np.any(np.diff(offsets) <= 0)
                or prefix.dtype != np.uint8 or prefix.ndim != 1):
            raise DatasetError(f"{path}: the {split} split's arrays do not match its header ({info.count:,} "
                               f"images): the file is damaged; pack it again")
        if len(labels) and (labels.min() < 0 or labels.max() >= len(arrays["class_names"])):
            raise DatasetError(f"{path}: {split} labels outside 0..{len(arrays['class_names']) - 1}")
    return header, arrays


def note(header: Header, path: Path) -> str:
    """What a Dataset (and so a card) says about a packed file's pixels."""
    maes = ", ".join(f"{v.mae:.2f}/255 on {s}" for s, v in header.splits.items())
    text = (f"the packed JPEG copy of {header.title} ({path.name}: quality {header.quality}, {header.subsampling}; "
            f"mean absolute error {maes} against its source)")
    if header.source_note:
        text += f"; its source: {header.source_note}"
    if "test" not in header.splits:
        text += "; no test split in this file: evaluate on the full data elsewhere"
    return text


def load_packed(path: str | os.PathLike) -> Dataset:
    """A packed file as the Dataset it was made from (named as it, "cifar10"; `note` says it is the JPEG
    copy); a split it does not pack is empty."""
    path = Path(path)
    header, arrays = read_packed(path)
    parts = {}
    for split in SPLITS:
        if split in header.splits:
            x = decode(arrays[f"{split}_jpeg"], arrays[f"{split}_offsets"], f"{path} {split}: ",
                       arrays[f"{split}_prefix"])
            expected = header.splits[split].decoded_sha256
            if expected and _sha256(x) != expected:
                raise DatasetError(f"{path}: the {split} split decodes to other pixels than were packed (their "
                                   f"SHA-256 differs from the header's): the file is damaged; pack it again")
            parts[split] = (x, arrays[f"{split}_labels"])
        else:
            parts[split] = (np.zeros((0, *IMAGE_SHAPE), np.uint8), np.zeros(0, np.int64))
    return Dataset(header.dataset, *parts["train"], *parts["test"], [str(c) for c in arrays["class_names"]],
                   str(path), note(header, path))


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _cmd_pack(args) -> None:
    start = time.perf_counter()
    header = pack(args.data_dir, args.out, args.quality, tuple(s for s in args.splits.split(",") if s),
                  args.subsampling)
    for split, info in header.splits.items():
        print(f"{split}: {info.count:,} images, {_mib(info.jpeg_bytes)} of JPEG, mean absolute error "
              f"{info.mae:.2f}/255")
    print(f"wrote {args.out}: {_mib(Path(args.out).stat().st_size)} ({header.title}, quality {header.quality}, "
          f"{header.subsampling}; from {header.source}) in {time.perf_counter() - start:.1f} s")


def _cmd_check(args) -> None:
    path = Path(args.file)
    header, _ = read_packed(path)
    print(f"{path}: {FORMAT} version {header.version}, {header.title}, quality {header.quality}, "
          f"{header.subsampling}, {_mib(path.stat().st_size)}")
    start = time.perf_counter()
    ds = load_packed(path)
    seconds = time.perf_counter() - start
    source = load_cifar(header.dataset, args.data_dir, download=False) if args.data_dir else None
    for split, info in header.splits.items():
        x, y = (ds.x_train, ds.y_train) if split == "train" else (ds.x_test, ds.y_test)
        line = f"{split}: {info.count:,} images, labels {np.bincount(y, minlength=ds.num_classes).tolist()}"
        if source is not None:
            original = source.x_train if split == "train" else source.x_test
            if _sha256(original) != info.sha256:
                raise DatasetError(f"{path}: the {split} pixels in {source.source} are not the ones it was "
                                   f"packed from (their SHA-256 differs from the header's)")
            line += f"; its source matches, mean absolute error {_mae(x, original):.2f}/255"
        print(line)
    print(f"decoded {len(ds.x_train) + len(ds.x_test):,} images in {seconds:.1f} s: ok")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m explorer.packed", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    pk = sub.add_parser("pack", help="pack a CIFAR folder into one .npz of JPEGs")
    pk.add_argument("--data-dir", help="folder holding the CIFAR pickles (else $EXPLORER_DATA_DIR, "
                                       "~/.keras/datasets); nothing is downloaded")
    pk.add_argument("--out", required=True, help="the packed file, ending in .npz (e.g. runs/cifar10-q90.npz)")
    pk.add_argument("--quality", type=int, default=90, help="JPEG quality, 1-95 (default 90)")
    pk.add_argument("--splits", default="train,test",
                    help="train, test or train,test (default); a train-only file loads with an empty test set")
    pk.add_argument("--subsampling", choices=SUBSAMPLING, default="4:2:0",
                    help="chroma subsampling (default 4:2:0; 4:4:4: about 12%% larger, 6%% less error)")
    ck = sub.add_parser("check", help="verify a packed file's header and decode every image")
    ck.add_argument("file")
    ck.add_argument("--data-dir", help="also compare with the CIFAR pickles here: the source's SHA-256 and the "
                                       "decoded pixels' error")
    args = p.parse_args(argv)
    try:
        (_cmd_pack if args.command == "pack" else _cmd_check)(args)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
