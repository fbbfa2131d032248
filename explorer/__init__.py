"""SPT/LSA ViT Explorer.

Importing the package registers its Keras objects (the layers and the learning-rate schedule), so
`keras.saving.load_model(folder)` loads a checkpoint after a plain `import explorer`; that is the one
thing an import does.
"""

from explorer.model import layers  # noqa: F401  (registration only)
from explorer.training import schedules  # noqa: F401  (registration only)
