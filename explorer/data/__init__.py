"""Images and how they reach a model: datasets from CIFAR, folders and zips (datasets, folders, packed),
the bundled samples (samples), an uploaded image made ready (inputs), and the batches a run trains on,
with their augmentation, on the host or on the device (augment, batches, step_augment, device_batches)."""
