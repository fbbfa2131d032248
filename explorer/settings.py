"""`python -m explorer.settings`: prints every setting as a Markdown table (explorer.core.settings)."""

from explorer.core.settings import Settings

if __name__ == "__main__":
    print(Settings.markdown_table())
