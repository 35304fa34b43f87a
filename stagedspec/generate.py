"""``python -m stagedspec.generate``: one prompt, ``stagedspec.app.generate``."""
from stagedspec.app.generate import main

if __name__ == "__main__":
    main()
