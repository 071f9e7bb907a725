"""``python -m snapstore``: the command-line interface (same as the ``snapstore`` command)."""

from .cli import main

if __name__ == "__main__":
    main()
