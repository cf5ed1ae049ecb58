"""Running one experiment: launch (process trees), execute (rows), the worker, the timing protocol,
the Trainer contract, the learning-rate table and fault injection."""
