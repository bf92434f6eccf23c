"""Closes job admission when actual spend crosses the monthly budget, and says so."""
