"""Running sweeps and notebooks: what the main job runs here (plan), the sweep over points,
ipyparallel MPI engines (cluster, engines), Slurm scripts."""
