"""``python -m stagedspec.run``: the experiment runner, ``stagedspec.app.run``."""

from stagedspec.app.run_entry import main

if __name__ == "__main__":
    main()
