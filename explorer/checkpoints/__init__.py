"""Trained models on disk and on the Hub: the checkpoint folder, its card and its lean weights (store;
`python -m explorer.checkpoints`), downloads from the Hub (hub), the runs a shared Space keeps per visitor
(visitors), and the models a page can choose, under their labels (catalog)."""
