"""snapstore.repo.log."""
