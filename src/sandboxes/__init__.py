"""Sandboxes: where the code a model writes (Python, shell) runs, bounded and isolated.

The contract (records, abstract classes) is src/sandboxes/contract.py; the settings
src/sandboxes/settings.py; `open_backend(settings)` and `check_sandbox_available(settings)`
are in src/sandboxes/backends.py; the warm pool src/sandboxes/pool.py; the `python` and
`bash` tools src/sandboxes/tools.py. The process that runs inside each sandbox (its
supervisor, standard library only) is the package src/sandboxes/supervisor/.

Layer: between the language models and the tasks; imports only the leaves.
"""
