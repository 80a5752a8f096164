"""What a reader sees: figures (plots), the Markdown report and README block (markdown), the
predictor's evidence in tables and figures (predictions), the report PDF (pdf)."""
