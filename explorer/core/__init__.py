"""What every layer reads, importing nothing of the package's own: the settings and the repository's
root (settings), the one write-then-rename (atomic), number formats (formatting), the device a run is on
(devices), a checkpoint's card in typed sections (card), what the app and its fine-tune worker send each
other (protocol), and a polling loop's wake-up call (wake)."""
