"""Agents: one folder per agent, split into networks / losses / learning / acting."""
