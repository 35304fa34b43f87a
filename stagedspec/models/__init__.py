"""Models: offline loading (local HF directories, GGUF files, the packaged chunks, tiny
and truncated models; the GGUF cache), trained draft files, text <-> token ids, the
kernel plan's calibration on this machine, and the disk cache they share."""
