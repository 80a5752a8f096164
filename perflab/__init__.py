"""perflab: learn, measure and explain data-parallel MLP training on GPUs with MPI."""
__version__ = "0.1.0"
