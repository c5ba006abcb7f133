"""The roles of an RL run placed on Ray actors (rollout workers, data-parallel learners); docs/distributed.md."""
