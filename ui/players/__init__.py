"""The browser players: the explorer's step view and How it learned's epoch view, their shared controls, and the packing of their data."""
