"""Fine-tuning, each file named for the process it runs in.

The app (the Gradio server) validates a request into a plan, writes it into a job folder and hands the
folder to a long-lived worker process with a Keras backend of its own (`python -m explorer.finetune
--serve`: JAX on a CUDA GPU when the GPU requirements are installed), which trains it and reports progress
as JSON lines; the app moves the checkpoints into place once the whole job has succeeded, so a cancelled
or crashed job leaves nothing behind.

What both processes read:
    plan.py        a request validated into a Plan: the data split once, one recipe, one or two members
    jobfolder.py   the job folder: written by the app, read by the worker, its staged checkpoints moved
                   into place by the app, all or nothing
    backend.py     the worker's Keras backend, chosen without importing a framework; the machine's facts
What the worker runs:
    serve.py       its main loop (`--serve`: commands in, events out) or one job (`JOB_DIR`); __main__.py
    job.py         one job: each member trained in turn, its events; the warm-up; a Measure's short run
    warm.py        the models it keeps between jobs, with their compiled steps
    compiling.py   JAX's persistent compilation cache, and what was compiled
What the app runs:
    runner.py      FineTuneRunner: one run at a time, its owner, Cancel, the hang watch, publishing
    queue.py       shared mode's first-come queue of Starts
    follow.py      a Start followed: its wait for a turn and its run as generators of typed updates, how far
                   a run has come, which slots its checkpoints go into
    state.py       a run's state as the worker's events change it, and what a Cancel did
    supervisor.py  the worker process kept, started and replaced
    handle.py      the worker process as the app holds it: its command line, commands sent, events heard
    report.py      the side-by-side report of a finished run, from its members' states
    estimate.py    what a run will cost on this machine: its work counted from the plan, the paces measured
                   (a Measure's few steps, or runs that ended), the time left while it runs
What they send each other is explorer.core.protocol (JSON lines: one dataclass per command and event), and
what a job trains is explorer.training.runs (train_new, fine_tune, the recipe's choice): both below this
package, which only runs jobs, so `python -m explorer.train` reaches the same training without it.

The page's words for all of this are in explorer/ui/finetune_text.py. Importing this package imports none
of its modules.
"""
