"""Offline group training: an RCE warm-up, then GRPO, on groups of candidates scored beforehand."""
