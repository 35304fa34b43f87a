"""Tuning: measure this machine and choose. The kernel plan's calibration
(``kernel_calibration``: ``kernels=fast``), ``tree=auto`` (Sequoia's program over measured
acceptance and costs, ``tree_program``; the measurement itself, acceptance per rank and
depth and the target's cost curve T(n), ``tree_calibration``; the resolver that caches it
and fixes a drafter's tree before anything is timed, ``auto_tree``) and the disk cache
they write (``disk_cache``). Called by a job's assembly, never by the engine at run time."""
