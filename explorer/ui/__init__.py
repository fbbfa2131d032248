"""The Gradio page: a shell (header, model slots, image column) and one module per tab, each building its
components and wiring its events with an `api_name`, so every handler is callable through gradio_client;
the public ones (the explorer's questions) are also MCP tools, the page's own wiring is unlisted.

    shell.py      build_demo: the page, the model slots and their handlers, a visitor's arrival (shared mode)
    context.py    AppState: the state every tab shares (explorer.app.state) as a Gradio page reaches it;
                  Page: the components every tab reads; TabComponents: those one tab makes for another
    cards.py      a model slot's card: what the loaded model is, or why it could not be loaded
    images.py     the image column: upload, preview, test samples, the bundled examples
    compare.py    Compare: top-5 of both models, disagreements over the test set
    patches.py    Patches: the vanilla grid and SPT's five shifted views
    attention.py  Attention: maps from a query patch, rollout, locality
    what_if.py    Attention's what-if switches: every layer's tau scaled, the diagonal mask switched
    evidence.py   Evidence: occlusion maps, and answers under shifts of a few pixels and a mirror
    trust.py      Trust: whole-set confusion, calibration, corruptions and how faithful each map is
    trust_text.py  the Trust tab's words: the verdict of shipped results, a job's cost before it starts, its
                  progress
    tau.py        Tau: each LSA layer's learned temperature
    data_size.py  Small data: the study's curve and tables; a training-set size's pair put in the slots
    finetune.py   Fine-tune: a run in a worker process, its queue on a shared instance, its report
    finetune_cost.py  what a run will cost, said under the form before its Start, and the faster choices
    finetune_run.py  what a Start shows: each update of its wait and its run (explorer.finetune.follow) as
                  the components', and its report once done
    finetune_text.py  the words for what the fine-tuning back end reports: a run's status, a place in the
                  queue, what a Cancel did, where runs train
    pictures.py   the output image component; handlers whose figures come out as pictures
    gradio_patches.py  every change to Gradio's own code: the MCP tool list, outputs and schemas, and the
                  image cache made atomic and fast (each pinned by a test of Gradio's behaviour under it)

Handlers are methods of one small class per tab, callable without a server; the work is below the UI
(explorer.app, analysis, samples, catalog, finetune).
"""

from explorer.ui.context import AppState
from explorer.ui.shell import build_demo, launch_kwargs

__all__ = ["AppState", "build_demo", "launch_kwargs"]
