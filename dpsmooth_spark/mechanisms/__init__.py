"""Release mechanisms: pure functions of exact sums, a noise source and an accountant."""
