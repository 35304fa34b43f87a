"""``python -m stagedspec.generate``: one prompt, ``stagedspec.app.generate``."""

from stagedspec.app.generate_entry import main

if __name__ == "__main__":
    main()
