"""The Vision Transformer: its configuration and presets (config), the SPT and LSA layers (layers, which
checkpoints name as explorer.layers), building, loading and reshaping a model (models), one compiled
forward pass per model (compiled), predicting and scoring (predict), the per-image probe of attention
and tokens (probe), and the names of the four variants (ablation)."""
