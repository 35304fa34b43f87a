"""Tuning: measure this machine and choose. The kernel plan's calibration
(``kernel_calibration``: ``kernels=fast``), ``tree=auto`` (Sequoia's program over measured
acceptance and costs, ``tree_program``; the measurement itself, acceptance per rank and
depth and the target's cost curve T(n), ``tree_calibration``; the resolver that caches it
on disk and hooks it into a drafter, ``auto_tree``) and the disk cache they write
(``disk_cache``)."""
