"""From measurements to understanding: FLOPs and bytes (perfmodel), rooflines and effective rates
of measured points (roofline), the bottom-up predictor and its validation, the multi-GPU
projection, the seeds' machine from its three rates."""
