"""The supervisor's command line: `python3 -I FOLDER serve CONFIG` (a sandbox's
supervisor) and `python3 -I FOLDER launch HOST_UID BWRAP...` (a root host's launch of
bubblewrap); FOLDER is this package's folder."""

import json
import os
import sys

# Run as a folder, the folder itself is sys.path[0] (even under -I). The package is
# imported from its parent instead, so that its modules' relative imports hold and none
# of them is importable under a second, top-level name; sys.path[0] comes before
# site-packages, where an unrelated `supervisor` may be installed. Inside the sandbox the
# parent holds only this folder; on the host (the unsafe backend, the launch) it is
# src/sandboxes.
sys.path[0] = os.path.dirname(sys.path[0])

from supervisor.identity import launch  # noqa: E402
from supervisor.startup import serve  # noqa: E402

if sys.argv[1] == "serve":
    serve(json.loads(sys.argv[2]))
elif sys.argv[1] == "launch":
    launch(int(sys.argv[2]), sys.argv[3:])
else:
    sys.exit(f"supervisor: unknown mode {sys.argv[1]!r}")
