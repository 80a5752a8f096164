"""What a reader sees: figures (plots), the Markdown report, the README headline and results/README.md (markdown), the
predictor's evidence in tables and figures (predictions), the report PDF (pdf)."""
