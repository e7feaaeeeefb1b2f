"""Adapters that plug tileattn into other libraries (each imports its library on first use)."""
