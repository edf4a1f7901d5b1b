"""northbound layer."""
