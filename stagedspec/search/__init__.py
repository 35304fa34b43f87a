"""``tree=auto``: Sequoia's program over measured acceptance and costs (``tree_program``),
the measurement itself (``tree_calibration``) and the resolver that caches it on disk and
hooks it into a drafter (``auto_tree``)."""
