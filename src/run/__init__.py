"""The run kernel every pipeline runs on: building components from a config (assembly),
the start every pipeline shares (start), the run folder (folder) with its resume check
(resume) and storage guard (storage_guard), the commit protocol with the best checkpoint
(protocol), metrics and trackers, held-out evaluation, lockstep rollout, and the callback
contract the loops call."""
