"""The simulator: scenarios, real traces, and their replay against gangsat schedulers."""
