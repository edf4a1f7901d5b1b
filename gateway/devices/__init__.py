"""Field devices: the registry of boards this gateway adopted and heard (registry.py), what provider
authentication asks of it (adopted.py) and the gateway's record of each hello (sightings.py)."""
