"""The command line, one module per room of the package: each command's options beside the function
that runs it, registered by the room's `register(sub)`; perflab.cli puts them together."""
