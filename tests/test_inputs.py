"""Every kind of upload: decoded into a (32, 32, 3) uint8 input, or refused with a clear message."""

import io
import time

import numpy as np
import pytest
from PIL import Image

from explorer.data.inputs import ImageInputError, load_image


def _save(tmp_path, name, image, **kwargs):
    path = tmp_path / name
    image.save(path, **kwargs)
    return path


def _png_bytes(image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def test_plain_rgb(tmp_path):
    x, preview = load_image(_save(tmp_path, "a.png", Image.new("RGB", (64, 48), (10, 200, 30))))
    assert x.shape == (32, 32, 3) and x.dtype == np.uint8 and tuple(x[5, 5]) == (10, 200, 30)
    assert preview.shape == (48, 64, 3)


@pytest.mark.parametrize("name, make, message", [
    ("empty.png", lambda p: p.write_bytes(b""), "is empty"),
    ("text.png", lambda p: p.write_text("hello, I am not a picture"), "not an image"),
    ("truncated.png", lambda p: p.write_bytes(_png_bytes(Image.effect_noise((200, 200), 50))[:3000]),
     "damaged or truncated"),
    ("truncated.jpg", lambda p: p.write_bytes(_jpeg_bytes()[:2000]), "damaged or truncated"),
    ("IMG_0042.HEIC", lambda p: p.write_bytes(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic"),
     "HEIC is not a format this app reads; save it as JPEG or PNG"),
])
def test_broken_files_are_refused_clearly(tmp_path, name, make, message):
    path = tmp_path / name
    make(path)
    with pytest.raises(ImageInputError, match=message) as e:
        load_image(path)
    assert name in str(e.value)


def _jpeg_bytes() -> bytes:
    buf = io.BytesIO()
    Image.effect_noise((300, 300), 60).convert("RGB").save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def test_missing_file(tmp_path):
    with pytest.raises(ImageInputError, match="did not arrive"):
        load_image(tmp_path / "gone.png")


def test_one_pixel(tmp_path):
    x, _ = load_image(_save(tmp_path, "1.png", Image.new("RGB", (1, 1), (255, 0, 0))))
    assert (x == [255, 0, 0]).all()


def test_huge_image_is_refused_from_its_header_fast(tmp_path):
    path = _save(tmp_path, "huge.png", Image.new("1", (10_000, 10_000)))
    start = time.perf_counter()
    with pytest.raises(ImageInputError, match=r"10000x10000 pixels \(100 MP\); the limit is 40 MP"):
        load_image(path)
    assert time.perf_counter() - start < 1.0


def test_large_image_within_the_cap(tmp_path):
    path = _save(tmp_path, "big.jpg", Image.new("RGB", (6000, 4000), (0, 0, 255)), quality=80)
    x, preview = load_image(path)
    assert x.shape == (32, 32, 3) and abs(int(x[10, 10, 2]) - 255) <= 2 and max(preview.shape) <= 256


def test_upload_size_cap(tmp_path):
    path = tmp_path / "big.png"
    path.write_bytes(b"\0" * 2048)
    with pytest.raises(ImageInputError, match="the limit is"):
        load_image(path, max_bytes=1024)


def test_grayscale(tmp_path):
    x, _ = load_image(_save(tmp_path, "g.png", Image.new("L", (40, 40), 77)))
    assert (x == 77).all()


def test_rgba_transparent_becomes_white(tmp_path):
    image = Image.new("RGBA", (40, 40), (255, 0, 0, 0))
    image.paste((0, 0, 255, 255), (0, 0, 40, 20))
    x, _ = load_image(_save(tmp_path, "t.png", image))
    assert tuple(x[2, 2]) == (0, 0, 255) and tuple(x[-2, -2]) == (255, 255, 255)


def test_palette(tmp_path):
    image = Image.new("RGB", (40, 40), (200, 100, 50)).convert("P", palette=Image.ADAPTIVE, colors=4)
    x, _ = load_image(_save(tmp_path, "p.png", image))
    assert np.abs(x[5, 5].astype(int) - [200, 100, 50]).max() <= 8


def test_palette_with_transparency(tmp_path):
    image = Image.new("P", (20, 20), 0)
    image.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    image.paste(1, (0, 0, 20, 10))
    x, _ = load_image(_save(tmp_path, "pt.png", image, transparency=0))
    assert tuple(x[2, 2]) == (255, 0, 0) and tuple(x[-2, -2]) == (255, 255, 255)


def test_sixteen_bit_png_is_scaled_not_saturated(tmp_path):
    a = np.zeros((32, 32), np.uint16)
    a[:16] = 65535
    a[16:] = 32768
    x, _ = load_image(_save(tmp_path, "16.png", Image.fromarray(a)))
    assert Image.open(tmp_path / "16.png").mode.startswith("I")
    assert (x[2] == 255).all() and (np.abs(x[-2].astype(int) - 128) <= 1).all()


def test_cmyk_jpeg(tmp_path):
    x, _ = load_image(_save(tmp_path, "c.jpg", Image.new("CMYK", (40, 40), (0, 255, 255, 0)), quality=95))
    assert x[10, 10, 0] > 200 and x[10, 10, 1] < 60 and x[10, 10, 2] < 60


def test_animated_gif_uses_the_first_frame(tmp_path):
    frames = [Image.new("RGB", (30, 30), c) for c in ((255, 0, 0), (0, 0, 255), (0, 255, 0))]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert Image.open(path).n_frames == 3
    x, _ = load_image(path)
    assert x[15, 15, 0] > 200 and x[15, 15, 2] < 60


def test_exif_rotation_is_applied(tmp_path):
    image = Image.new("RGB", (40, 20), (255, 0, 0))
    image.paste((0, 0, 255), (20, 0, 40, 20))  # left red, right blue
    exif = Image.Exif()
    exif[0x0112] = 6  # display rotated 90 degrees clockwise
    path = _save(tmp_path, "rot.jpg", image, exif=exif.tobytes(), quality=95)
    _, preview = load_image(path)
    assert preview.shape[:2] == (40, 20)  # portrait after rotation
    assert preview[2, 10, 0] > 200 and preview[-2, 10, 2] > 200  # red on top, blue at the bottom


def test_the_original_size_and_what_the_models_did_to_it(tmp_path):
    from explorer.data.inputs import original_size, resize_note
    path = tmp_path / "wide.png"
    Image.new("RGB", (500, 300), (10, 20, 30)).save(path)
    assert original_size(path) == (500, 300)
    note = resize_note((500, 300), [32, 32])
    assert "500x300" in note and "squashed to 32x32" in note and "aspect ratio" in note
    assert resize_note((32, 32), [32, 32]) == "" and "resized to 32x32" in resize_note((64, 64), [32])
    bad = tmp_path / "bad.png"
    bad.write_text("not an image")
    assert original_size(bad) is None and resize_note(None, [32]) == ""


def test_a_file_in_a_zip_gives_the_model_what_the_same_file_uploaded_alone_does(tmp_path):
    """One photo, one model input: a fine-tune's zip (and Trust's) reads each image as an upload is read, so
    transparency is white and 16-bit images are scaled in a zip too, not black and saturated."""
    import zipfile

    from explorer.data.folders import read_image_zip
    rng = np.random.default_rng(0)
    photo = Image.fromarray(rng.integers(0, 256, (1200, 1600, 3), np.uint8)).resize((3200, 2400))
    transparent = Image.new("RGBA", (40, 40), (255, 0, 0, 0))
    transparent.paste((0, 0, 255, 255), (0, 0, 40, 20))
    deep = np.zeros((32, 32), np.uint16)
    deep[:16], deep[16:] = 65535, 32768
    palette = Image.new("P", (20, 20), 0)
    palette.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    palette.paste(1, (0, 0, 20, 10))
    exif = Image.Exif()
    exif[0x0112] = 6
    files = {"a-photo": _save(tmp_path, "photo.jpg", photo, quality=90),  # decoded at a reduced DCT scale
             "b-transparent": _save(tmp_path, "t.png", transparent),
             "c-deep": _save(tmp_path, "16.png", Image.fromarray(deep)),
             "d-palette": _save(tmp_path, "pt.png", palette, transparency=0),
             "e-rotated": _save(tmp_path, "rot.jpg", photo.resize((400, 200)), exif=exif.tobytes()),
             "f-cmyk": _save(tmp_path, "c.jpg", Image.new("CMYK", (40, 40), (0, 255, 255, 0)))}
    with zipfile.ZipFile(tmp_path / "kinds.zip", "w") as z:
        for kind, path in files.items():
            z.write(path, f"kinds/{kind}/{path.name}")
    ds = read_image_zip(tmp_path / "kinds.zip", test_fraction=0.0)
    assert ds.class_names == list(files)
    for kind, image in zip(files, ds.x_train, strict=True):
        alone, _ = load_image(files[kind])
        assert np.array_equal(image, alone), kind
    assert tuple(ds.x_train[1][-2, -2]) == (255, 255, 255) and abs(int(ds.x_train[2][-2, 5, 0]) - 128) <= 1
