"""snapstore.manager."""
