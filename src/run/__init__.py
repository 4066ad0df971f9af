"""The run kernel every pipeline runs on: building components from a config (assembly),
the run folder and its resume check (folder), the commit protocol with the best checkpoint
(protocol), metrics and trackers, held-out evaluation, lockstep rollout, and the callback
contract the loops call."""
