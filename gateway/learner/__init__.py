"""The ACE learner: traces, feedback, Reflector and Curator, and the worker that merges."""
