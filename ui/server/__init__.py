"""The server: its start (the model loading at once), the ASGI app it serves, replicas behind nginx, and the wiring done once at start."""
