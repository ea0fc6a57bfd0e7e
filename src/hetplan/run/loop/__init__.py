"""A rank's training loop: the job it gets, its set-up, its steps, trials and step log."""
