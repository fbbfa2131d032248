"""SPT/LSA ViT Explorer: `python app.py` (the file a Hugging Face Space runs).

Settings are environment variables (docs/settings.md); `--host`, `--port` and `--no-mcp` set the usual
ones from the command line. The options are read before anything heavy is imported, so `--help` answers at
once.
"""

import argparse
import os


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="SPT/LSA ViT Explorer: a vanilla ViT and an SPT/LSA ViT side by side in the browser.",
        epilog="Gradio's GRADIO_SERVER_NAME and GRADIO_SERVER_PORT work too; the options win. Every other "
               "setting (EXPLORER_*) is in docs/settings.md.")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    parser.add_argument("--port", type=int, help="port to listen on (default 7860, or the next free one)")
    parser.add_argument("--no-mcp", action="store_true", help="do not serve the tools over MCP (also EXPLORER_MCP=0)")
    return parser.parse_args(argv)


def build(settings=None):
    """The app: its state (the shipped pair loaded, the first visit analysed, the fine-tuning worker
    starting in the background) and its Gradio page. `settings` (explorer.core.settings.Settings): by default the
    environment's, read here once (after the libraries' defaults below are set)."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from explorer.core.settings import Settings
    from explorer.ui import AppState, build_demo
    state = AppState(settings=Settings.from_env() if settings is None else settings)
    state.preload()
    state.prepare_finetuning()
    return state, build_demo(state)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.host:  # Gradio's own variables: the settings read them, and Gradio the port
        os.environ["GRADIO_SERVER_NAME"] = args.host
    if args.port:
        os.environ["GRADIO_SERVER_PORT"] = str(args.port)
    state, demo = build()
    from explorer.ui import launch_kwargs
    demo.queue(default_concurrency_limit=4).launch(**launch_kwargs(state.settings, mcp=not args.no_mcp))


if __name__ == "__main__":
    main()
else:  # imported (gradio's reload mode, a notebook): the page is `app.demo`
    state, demo = build()
