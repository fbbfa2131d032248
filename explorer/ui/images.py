"""The image column: an upload, its preview, test samples by class, and the bundled examples (both right,
they disagree, both wrong) that fill every tab when clicked."""

from __future__ import annotations

import gradio as gr

from explorer.analysis.render import square
from explorer.data.datasets import DatasetError
from explorer.data.samples import Example, examples
from explorer.ui.context import UNLISTED, AppState, reporter
from explorer.ui.pictures import picture

PREVIEW = 224
PREVIEW_BOX = 196  # px: the preview's box (the picture scaled into it)
CASES = {"both": "both right", "a": "only A right", "b": "only B right", "neither": "both wrong"}


class ImagesColumn:
    def __init__(self, app: AppState):
        self.app = app

    def truth(self, file) -> str:
        found = self.app.tests.identify(file) if file else None
        return f"True label: **{found[2]}** ({found[0]} test image #{found[1]})" if found else ""

    def take_image(self, file):
        """Preview of an upload (or a clear reason why it cannot be used) and its true label when known."""
        if file is None:
            return None, "", ""
        try:
            _, preview = self.app.image(file)
        except gr.Error as e:
            return None, f"**⚠ {e.message}**", ""
        shown = square(preview, PREVIEW) if max(preview.shape[:2]) * 2 <= PREVIEW else preview
        return shown, "", self.truth(file)

    def sample(self, class_name: str, ref_b: str | None, seed: float | None = None, request: gr.Request = None,
               progress=gr.Progress()):
        """A test image of model B's dataset (random, or of one class) with its true label: an image to give
        the other tools (pass its URL as their file). For a model of classes of its own, one of the images its
        fine-tune held out.

        Args:
            class_name: a class name of that dataset, or "random"
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            seed: picks the image reproducibly; -1 or none for a random one

        Returns:
            the image (PNG), its preview as the models see it, its true label (Markdown)
        """
        try:
            sample = self.app.sample(class_name, ref_b, None if seed is None else int(seed), request,
                                     reporter(progress))
        except DatasetError as e:
            raise gr.Error(f"no {self.app.dataset_of(ref_b, request)} test samples: {e}") from None
        except ValueError as e:
            raise gr.Error(str(e)) from None
        truth = f"True label: **{sample.label}** ({sample.dataset} test image #{sample.index})"
        return sample.path, square(sample.image, PREVIEW), truth

    def data_note(self, ref_b: str | None, request: gr.Request = None) -> str:
        """Where Sample draws its images for slot B's model, in one line: its fine-tune's held-out images (a
        model of classes of its own), none (such a model without them), or the CIFAR test set (where it is)."""
        held = self.app.held_out(ref_b, request)
        if held is not None:
            source = held.name.removeprefix("held-out ")
            return (f"_Test samples: the {len(held.y_test):,} images slot B's fine-tune held out of {source} "
                    f"(never trained on), labelled in its {len(held.class_names)} classes of its own._")
        if ref_b and not self.app.sample_classes(ref_b, request):
            return ("_Test samples: none for slot B's model: it knows classes of its own, and its checkpoint holds "
                    "no held-out images of them. Upload an image above._")
        return self.app.tests.note(self.app.shared)

    def classes(self, ref_b: str | None, request: gr.Request = None):
        """The sample's class list for slot B's model: the test set's classes it knows."""
        return gr.update(choices=["random"] + self.app.sample_classes(ref_b, request), value="random")


def build(app: AppState, slot_b: gr.Dropdown, loaded: tuple, first: Example | None) -> gr.File:
    """The column's components and events (`loaded`: the States that change with the slots' models);
    returns the upload every tab reads."""
    col = ImagesColumn(app)
    classes = ["random"] + app.sample_classes(app.initial_refs()[1])
    preview0, note0, truth0 = col.take_image(first.path) if first else (None, "", "")
    upload = gr.File(first.path if first else None, label=f"Image ({app.images.limits})", file_types=["image"],
                     type="filepath", elem_id="upload")
    # Always there, also while the upload box shows a file (it takes a new one only once cleared).
    own = gr.UploadButton("⬆ Upload your own image: JPEG, PNG, WebP…", file_types=["image"], type="filepath", size="sm",
                          elem_id="upload-own")
    # Right under the upload, where the eye is: why an image cannot be used (every tab points here).
    image_note = gr.Markdown(note0, elem_id="image-note")
    # The picture the answers are about, on a laptop's first screen (857 px high) at either width.
    preview = picture("Input", captioned=False, height=PREVIEW_BOX, elem_id="preview", value=preview0)
    found = examples()
    if found:
        # A click puts the file in the upload, whose change fills every tab. Under the preview, still on the
        # first screen at 1280 px (beside the preview, in a column of its own, at 800 px: page.css).
        gr.Examples([[e.path] for e in found], [upload], elem_id="examples",
                    label="Examples: click one (true label · who is right, of the first visit's pair)",
                    example_labels=[f"{e.label} · {CASES.get(e.case, e.case)}" for e in found])
    with gr.Row(elem_id="sample-row"):
        # Any name through the API (the choices follow slot B's model on the page, not an API caller's): the
        # handler refuses a class there is no image of.
        sample_class = gr.Dropdown(classes, value="random", label="Test sample of class", scale=2,
                                   allow_custom_value=True)
        sample_btn = gr.Button("Sample", scale=1, elem_id="sample")
    # Hidden in the page (always random there); API callers pass a seed to pick reproducibly.
    sample_seed = gr.Number(-1, visible=False, label="seed (-1: random)")
    truth = gr.Markdown(truth0, elem_id="truth")
    data_note = gr.Markdown(col.data_note(app.initial_refs()[1]), elem_id="data-note")
    own.upload(lambda file: file, [own], [upload], api_name=False, queue=False)
    upload.change(col.take_image, [upload], [preview, image_note, truth], api_name="image", **UNLISTED)
    gr.on([state.change for state in loaded], col.classes, [loaded[1]], [sample_class], api_name=False, queue=False)
    gr.on([state.change for state in loaded], col.data_note, [loaded[1]], [data_note], api_name=False, queue=False)
    sample_btn.click(col.sample, [sample_class, slot_b, sample_seed], [upload, preview, truth], api_name="sample")
    return upload
