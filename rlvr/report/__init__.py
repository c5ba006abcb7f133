"""Reading a finished (or running) run folder: the doctor and the HTML report."""
