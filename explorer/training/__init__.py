"""Training and fine-tuning: the recipe (recipe, schedules), the loop and what it records (fitting,
fit_state, backup), a fine-tune's head and its decision (head, linear_probe, tuning), and the functions
the command line and the fine-tune jobs call (runs)."""
