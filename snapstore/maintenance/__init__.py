"""snapstore.maintenance."""
