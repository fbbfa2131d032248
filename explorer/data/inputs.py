"""Decoding user uploads into model inputs: any format, mode or size, with a clear error otherwise."""

from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np

from explorer.core.settings import Settings

# The defaults; the app passes its own (EXPLORER_MAX_UPLOAD_MB, EXPLORER_MAX_PIXELS) to DecodedImages.
MAX_UPLOAD_BYTES = Settings.max_upload_mb * 2**20
MAX_PIXELS = Settings.max_pixels


class ImageInputError(ValueError):
    """An upload that cannot be used as an image; the message says why, in the user's terms."""

# Photo formats Pillow does not decode (a phone's HEIC, a camera's raw files): an upload of one, or
# one among a folder's images, is named as unreadable with what to do, not passed over as if the folder had none.
UNDECODED = (".heic", ".heif", ".jxl", ".dng", ".cr2", ".nef", ".arw")


def _to_rgb(img):
    from PIL import Image
    if img.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        # 16-bit and float images: scale to 8 bits instead of letting convert() saturate at 255.
        a = np.asarray(img, dtype=np.float64)
        top = 65535.0 if img.mode.startswith("I;16") or a.max() > 255 else 255.0
        if img.mode == "F" and a.max() <= 1.0:
            top = 1.0
        a = np.clip(a / top * 255.0, 0, 255).astype(np.uint8)
        return Image.fromarray(a).convert("RGB")
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        # Transparent pixels become white, as a browser shows them on a white page.
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


PREVIEW = 256  # px: the longest side of an upload's preview


def upright_rgb(img, size: int, preview: int = PREVIEW):
    """An opened image's pixels as every image of this app is read, an upload alone or one in a zip or
    folder (so that one file gives one model input either way): its first frame (of an animation),
    decoded (a JPEG at the smallest DCT scale that keeps twice max(preview, size) px: a 12-MP photo reads
    three to four times faster), turned upright by its EXIF orientation, transparency composited on white,
    16-bit and float images scaled to 8 bits, as an RGB PIL image."""
    from PIL import ImageOps
    img.seek(0)
    if img.format == "JPEG":
        img.draft("RGB", (max(preview, size) * 2, max(preview, size) * 2))
    img.load()
    return _to_rgb(ImageOps.exif_transpose(img))


def model_pixels(rgb, size: int) -> np.ndarray:
    """An upright RGB image squashed to size x size, the way the training images were resized (bilinear)."""
    from PIL import Image
    return np.asarray(rgb.resize((size, size), Image.BILINEAR), dtype=np.uint8)


def load_image(path: str | os.PathLike, size: int = 32, preview: int = PREVIEW,
               max_pixels: int = MAX_PIXELS, max_bytes: int = MAX_UPLOAD_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """(model input uint8 (size, size, 3), preview uint8 RGB at most `preview` px) from an image file.

    EXIF rotation is applied, the first frame of an animation is used, transparency is composited on
    white, 16-bit images are scaled to 8 bits; the image is squashed to a square the way the
    training images were resized.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    name = path.name
    try:
        nbytes = path.stat().st_size
    except OSError:
        raise ImageInputError(f"{name}: the upload did not arrive (no file)") from None
    if nbytes == 0:
        raise ImageInputError(f"{name} is empty (0 bytes)")
    if nbytes > max_bytes:
        raise ImageInputError(f"{name} is {nbytes / 2**20:.1f} MB; the limit is {max_bytes / 2**20:.0f} MB")
    try:
        with warnings.catch_warnings():
            # Our own pixel cap (below PIL's) is checked from the header before anything is decoded.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as img:
                width, height = img.size
                if width * height > max_pixels:
                    raise ImageInputError(f"{name} is {width}x{height} pixels "
                                          f"({width * height / 1e6:.0f} MP); the limit is "
                                          f"{max_pixels / 1e6:.0f} MP")
                if width < 1 or height < 1:
                    raise ImageInputError(f"{name} has no pixels ({width}x{height})")
                rgb = upright_rgb(img, size, preview)
    except ImageInputError:
        raise
    except UnidentifiedImageError:
        if path.suffix.lower() in UNDECODED:
            raise ImageInputError(f"{name}: {path.suffix[1:].upper()} is not a format this app reads; save it as "
                                  f"JPEG or PNG") from None
        raise ImageInputError(f"{name} is not an image PIL can read (is it really "
                              f"{path.suffix or 'an image'}?)") from None
    except Image.DecompressionBombError:
        raise ImageInputError(f"{name} has far more pixels than the limit of {max_pixels / 1e6:.0f} MP") from None
    except (OSError, SyntaxError, ValueError, EOFError) as e:
        raise ImageInputError(f"{name} is damaged or truncated ({e})") from None
    model_input = model_pixels(rgb, size)
    shown = rgb.copy()
    shown.thumbnail((preview, preview), Image.BILINEAR)
    return model_input, np.asarray(shown, dtype=np.uint8)


def original_size(path: str | os.PathLike) -> tuple[int, int] | None:
    """(width, height) of an image file as it is shown upright (EXIF rotation applied), read from its
    header; None when it cannot be read."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(path) as img:
            width, height = img.size
            if img.getexif().get(0x0112) in (5, 6, 7, 8):  # rotated a quarter turn
                width, height = height, width
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
    return width, height


def resize_note(size: tuple[int, int] | None, model_sizes: list[int]) -> str:
    """What the models did to an image of `size` (width, height): resized, or squashed when it is not
    square (as their training images were); empty when it already has their size."""
    if size is None:
        return ""
    width, height = size
    targets = " and ".join(f"{n}x{n}" for n in sorted(set(model_sizes)))
    if width == height:
        return "" if all(n == width for n in model_sizes) else f"Your {width}x{height} image was resized to {targets}."
    return (f"Your {width}x{height} image was squashed to {targets} for the models (its aspect ratio is not "
            f"kept, as their training images' was not): a crop to the object keeps its shape.")


class DecodedImages:
    """Decoded uploads, kept by (path, mtime, size): one upload fires a handler per tab, each decodes it
    once. The arrays are read-only: every session shares them."""

    def __init__(self, capacity: int = 32, max_pixels: int = MAX_PIXELS, max_bytes: int = MAX_UPLOAD_BYTES):
        self.capacity = capacity
        self.max_pixels, self.max_bytes = max_pixels, max_bytes
        self._items: OrderedDict[tuple, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def limits(self) -> str:
        """How large an upload may be, said before one is refused."""
        return f"≤ {self.max_bytes / 2**20:.0f} MB, ≤ {self.max_pixels / 1e6:.0f} MP"

    def get(self, path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
        """(model input, preview) of an image file, as load_image gives them; ImageInputError otherwise."""
        stat = os.stat(path) if os.path.exists(path) else None
        key = (str(path), stat.st_mtime_ns if stat else 0, stat.st_size if stat else -1)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        image, preview = load_image(path, max_pixels=self.max_pixels, max_bytes=self.max_bytes)
        image.setflags(write=False)
        preview.setflags(write=False)
        with self._lock:
            self._items[key] = (image, preview)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return image, preview
