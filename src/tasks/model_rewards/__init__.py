"""Rewards given by models: a judge model behind an OpenAI-compatible server (`judge`) and a
sequence-classification reward model (`reward_model`), each a rubric's reward function
that runs in the calling process (src/tasks/rubric.py, `runs_in_caller`)."""
