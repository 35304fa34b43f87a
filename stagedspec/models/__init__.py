"""Models: offline loading (local HF directories, GGUF files, the packaged chunks, tiny
and truncated models; the GGUF cache), trained draft files and text <-> token ids. Loading
only: what is measured on this machine (the kernel plan's calibration, the disk cache it
writes) lives in ``stagedspec/tuning/``."""
