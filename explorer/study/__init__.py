"""The small-data study: the grid of trials on Ray Tune (grid; `python -m explorer.study`), its tables
and figures (report), and what LSA does inside each kept model (mechanisms)."""
