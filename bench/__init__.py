"""Benchmarks (`make bench` / `python -m bench [name ...]`); figures go to stdout and bench/results/."""
