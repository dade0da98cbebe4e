"""Proving fixes: reproducers (data), drivers (real or simulated), runs, statistics, evidence."""
