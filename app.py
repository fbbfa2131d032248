"""SPT/LSA ViT Explorer: `python app.py` (the file a Hugging Face Space runs)."""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from explorer.ui import Explorer, build_demo, launch_kwargs  # noqa: E402

explorer = Explorer()
explorer.preload()
demo = build_demo(explorer)

if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="SPT/LSA ViT Explorer (settings: README.md)")
    parser.add_argument("--no-mcp", action="store_true", help="do not serve the tools over MCP (also EXPLORER_MCP=0)")
    args = parser.parse_args()
    demo.queue(default_concurrency_limit=4).launch(**launch_kwargs(mcp=not args.no_mcp))
