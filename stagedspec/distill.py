"""``python -m stagedspec.distill``: train drafts for a target, ``stagedspec.app.distill``."""

from stagedspec.app.distill_entry import main

if __name__ == "__main__":
    main()
