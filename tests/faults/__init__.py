"""Fault injectors for the seam tests."""
