"""What a reader sees: figures (plots), the Markdown report and README block (markdown), the
report PDF (pdf)."""
