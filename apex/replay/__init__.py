"""Replay: the transition table, the n-step accumulator, the writer and the dataset."""
