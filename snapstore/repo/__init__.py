"""snapstore.repo."""
