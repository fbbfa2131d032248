"""The Gradio page: a shell (header, model slots, image column) and one module per tab, each building its
components and wiring its events with an `api_name`, so every handler is callable through gradio_client;
the public ones (the explorer's questions) are also MCP tools, the page's own wiring is unlisted.

    shell.py      build_demo: the page, the model slots, a visitor's arrival (shared mode)
    cards.py      a model slot's card: what the loaded model is, or why it could not be loaded
    context.py    Explorer: the state every tab shares (models, results, test images, runs, visitors)
    images.py     the image column: upload, preview, test samples, the bundled examples
    compare.py    Compare: top-5 of both models, disagreements over the test set
    patches.py    Patches: the vanilla grid and SPT's five shifted views
    attention.py  Attention: maps from a query patch, rollout, locality; what_if.py: the LSA switches
    tau.py        Tau: each LSA layer's learned temperature
    finetune.py   Fine-tune: a run in a worker process, its queue on a shared instance, its report
    pictures.py   the output image component and Gradio's image cache made atomic and fast
    tools.py      the MCP tools (the public endpoints): Gradio's MCP server fixed for outputs and schemas

Handlers are methods of one small class per tab, callable without a server; the work is below the UI
(workbench, reports, samples, finetune).
"""

from explorer.ui.context import Explorer
from explorer.ui.shell import build_demo, launch_kwargs

__all__ = ["Explorer", "build_demo", "launch_kwargs"]
