"""The app without its page: what every part of it shares, below the Gradio page (explorer.ui) and above
the fine-tune service it runs (explorer.finetune) and the library.

    state.py      ExplorerState: the models and their caches, the test images, the fine-tune runner, and on a
                  shared instance each page's visitor and what they may reach
    workbench.py  ModelStore and ResultCache (a slot's model loaded once, an image's analysis computed once),
                  per-image analysis, the what-if switches
    sharing.py    shared mode's open pages: each one's visitor, the runs that pruning keeps for them
"""
