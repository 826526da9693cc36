"""R2D2: recurrent Q-learning on prioritized overlapping sequences with stored state."""
