"""The visitor's state and links: the session's keys with their types and defaults, and the address bar."""
