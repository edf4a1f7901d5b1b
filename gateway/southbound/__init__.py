"""southbound layer."""
