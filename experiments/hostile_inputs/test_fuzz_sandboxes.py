"""The sandbox study tool: a short run counts bounds named through every channel and
episodes of both tool tasks, and its checks see what they look for (a file made outside,
a changed canary, a secret in an output, a process left holding the marker)."""

from __future__ import annotations

import json
import secrets
import subprocess
import tempfile
from pathlib import Path

from experiments.hostile_inputs.fuzz_sandboxes import Host, main


def test_a_short_run_names_the_bounds_and_scores_the_episodes(tmp_path: Path) -> None:
    output = tmp_path / "fuzz.json"
    main(["--seed", "0", "--tries", "2", "--entries",
          "sh_yes,py_big_file,sh_nohup,py_write_outside", "--episodes", "2",
          "--batch_size", "2", "--output", str(output)])
    targets = {t["target"]: t for t in json.loads(output.read_text())["targets"]}
    calls = targets["sandbox calls and tools"]
    assert calls["tries"] == 4 * 2 + 2  # each entry through its two channels, then random
    statuses = calls["statuses"]
    assert statuses["run output_limit"] == statuses["bash_tool output_limit"] == 1
    assert statuses["run_python file_size_limit"] == statuses["python_tool file_size_limit"] == 1
    for name in ("code_tests episodes", "shell_tasks episodes"):
        assert targets[name]["tries"] == 2 and targets[name]["calls"] >= 2
    # (misnamed, infrastructure and unscored are the study's findings: a random draw may
    # meet one the sandbox layer still has, see NOTES.md)
    assert all(t["crashes"] == t["hangs"] == t["escapes"] == t["leftovers"]
               == t["bounds_exceeded"] == 0 for t in targets.values())


def test_the_checks_see_a_file_outside_a_canary_a_secret_and_a_process() -> None:
    host = Host.prepare()
    marker = f"fuzzmarktest{secrets.token_hex(3)}"
    try:
        (Path(tempfile.gettempdir()) / marker).write_text("x")
        host.canaries[1].write_text("changed")
        assert len(host.outside_changes(marker)) == 2
        assert host.outside_changes(marker) == []  # removed and restored
        assert host.output_escapes(f"read: {host.secret}") and not host.output_escapes("no")
        process = subprocess.Popen(["bash", "-c", f"exec -a {marker}-sleep sleep 30"])
        assert any(marker in line for line in host.leftovers(marker))
        assert process.wait(timeout=5) == -9
    finally:
        for canary in host.canaries:
            canary.unlink(missing_ok=True)
