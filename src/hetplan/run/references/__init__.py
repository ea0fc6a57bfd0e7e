"""One-process reference runs the distributed ones are checked against."""
