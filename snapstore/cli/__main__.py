"""``python -m snapstore.cli``: the command line (same as the ``snapstore`` command)."""

from . import main

if __name__ == "__main__":
    main()
