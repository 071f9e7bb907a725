"""Loaded by child processes of the flock-fallback tests (on PYTHONPATH): removes the OFD lock
constants from fcntl, as on macOS or a Linux before 3.15, before snapstore is imported."""
import fcntl

for _name in ("F_OFD_SETLK", "F_OFD_SETLKW", "F_OFD_GETLK"):
    if hasattr(fcntl, _name):
        delattr(fcntl, _name)
