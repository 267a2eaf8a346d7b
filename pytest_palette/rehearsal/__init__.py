"""The rehearsal model: a scripted, deterministic stand-in for a language model."""
