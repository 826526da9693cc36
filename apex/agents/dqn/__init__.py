"""Ape-X DQN."""
