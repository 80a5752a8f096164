"""What a reader sees: figures (plots), the Markdown report, the README headline and the results root's README.md (markdown), the
predictor's evidence in tables and figures (predictions), the report PDF (pdf)."""
