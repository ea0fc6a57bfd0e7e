"""Start the ranks of a run (local or per node), watch them, gather their results."""
