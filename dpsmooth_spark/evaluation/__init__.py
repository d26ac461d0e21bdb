"""Utility evaluation of releases (query families, error metrics)."""
