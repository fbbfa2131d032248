"""What the app shows about trained models: attention evidence and robustness (evidence, robustness),
corruptions and faithfulness (corruptions, faithfulness, trust, trust_service), side-by-side reports
(reports), re-evaluating checkpoints (evaluate; `python -m explorer.evaluate`) and the pictures (render,
render_evidence, render_trust, plots)."""
