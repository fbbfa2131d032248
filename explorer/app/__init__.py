"""The app without its page: what every part of it shares, below the Gradio page (explorer.ui) and above
the fine-tune service it runs (explorer.finetune) and the library.

    state.py      ExplorerState: the models and their caches, the test images, the fine-tune runner, and on a
                  shared instance each page's visitor and what they may reach
    models.py     LoadedModel and ModelStore: a slot's model loaded once per reference, the recent ones kept
    results.py    ResultCache: an image's probe result computed once per model and what-if setting; top-5
    attention.py  the Attention tab's views of one image for a pair (a layer each, heads, sheet, rollout)
    what_if.py    a model's learned outputs beside those with tau scaled and the mask switched
    visitors.py   shared mode's open pages: each one's visitor, the runs that pruning keeps for them
    starts.py     each visitor's last fine-tune Start, for the pages they open (and its bases kept from pruning)
    costs.py      what a fine-tune will cost here, said before its Start (measured first where need be), and
                  the faster choices when it is long on a CPU
"""
