"""The Patches tab: the vanilla ViT's patch grid and SPT's five views (the image and its four half-patch
shifts), at the patch size of the SPT model in use."""

from __future__ import annotations

import gradio as gr

from explorer.analysis import render
from explorer.analysis.render import square
from explorer.ui.context import AppState, Page, initial, quiet
from explorer.ui.pictures import picture


class PatchesTab:
    def __init__(self, app: AppState):
        self.app = app

    def patches(self, file, ref_a: str, ref_b: str, request: gr.Request = None):
        """How each model cuts the image into patches: the vanilla ViT's plain patch grid, and Shifted Patch
        Tokenization's five views (the image and its four half-patch diagonal shifts) cut the same way.

        Args:
            file: the image: an http(s) or data URL (JPEG, PNG, WebP...; up to 25 MB, 40 MP; squared, resized)
            ref_a: model A: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]
            ref_b: model B: a reference listed by the models tool, or a Hugging Face Hub id owner/name[@revision]

        Returns:
            the plain grid (image), the five shifted grids (gallery), a note on patch and input sizes
        """
        image, preview = self.app.image(file)
        a, b = self.app.pair(ref_a, ref_b, request)
        model = b if b.config.use_spt or not a.config.use_spt else a
        config = model.config
        # The grids show the image as the model sees it: resized to its working size.
        shown = square(preview, config.input_size) if config.input_size != config.image_size else image
        grids = render.spt_grids(shown, config.patch_size)
        note = (f"Patch size **{config.patch_size} px** on the {config.input_size}×{config.input_size} input "
                f"of **{model.name}**; each shifted view moves the image by half a patch "
                f"({config.patch_size // 2} px), zeros where it was padded. SPT concatenates the five "
                f"views' patches before the projection.")
        return render.patch_grid(shown, config.patch_size), [(g, name) for name, g in grids.items()], note


def build(app: AppState, page: Page) -> PatchesTab:
    tab = PatchesTab(app)
    plain, views, note = initial(tab.patches, page.first, *page.refs, default=(None, None, ""))
    with gr.Tab("Patches", id="patches"):
        patch_note = gr.Markdown(note, elem_id="patch-note")
        grid_plain = picture("vanilla ViT patches", value=plain)
        # As many views to a row as fit at 0.75 of their size or more (page.css): in two rows rather than
        # five shrunk to a third.
        grids = gr.Gallery(views, format="png", label="SPT: the image and its four half-patch shifts", columns=5,
                           height="auto", object_fit="contain", allow_preview=True, elem_id="spt-views")
        patches_btn = gr.Button("Show patches", elem_id="patches-btn")

    inputs, outputs = [page.upload, page.slot_a, page.slot_b], [grid_plain, grids, patch_note]
    patches_btn.click(tab.patches, inputs, outputs, api_name="patches", concurrency_limit=4)
    gr.on(page.new_input(), quiet(tab.patches, (None, None, ""), why=2), page.held(inputs), outputs, api_name=False,
          concurrency_limit=4)
    return tab
