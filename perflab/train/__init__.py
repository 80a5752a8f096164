"""The trainers and what they stand on: the model's math, the training loop, data and model
parallel over MPI, the fused GPU trainer and its pipelined staged path, the gradient exchange,
the phase timers, and what `perflab train`/`check` run on each rank."""
