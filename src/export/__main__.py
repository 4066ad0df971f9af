"""Export a run's checkpoint: python -m src.export OUTPUT_DIR --target_dir DIR

Writes DIR/adapter (the PEFT adapter) and DIR/merged (a Hugging Face model folder with the
adapter merged in, which transformers and vLLM load as they are). DIR lies outside the run
folder and is new, empty or an earlier export (exit status 2 otherwise).

A run folder may come from anyone, so the command imports no code from a run folder: a
module that would be imported from a file inside a run folder, or from outside the
project and the installed packages, is refused before it runs (exit status 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from src.configuration.import_guard import RefusedImport, confined_imports
from src.export.checkpoint_export import (
    DTYPES,
    ExportError,
    check_target,
    export_adapter,
    export_merged,
    find_adapter,
)
from src.storage.files import DamagedRunFolder
from src.storage.run_layout import STATE_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output_dir", type=Path, metavar="OUTPUT_DIR", help="a run folder")
    parser.add_argument("--target_dir", type=Path, required=True)
    parser.add_argument("--checkpoint", default="best",
                        help="best (default), latest, or a committed step")
    parser.add_argument("--callback", default=None,
                        help="the callback whose checkpoints to export, when a run has several")
    parser.add_argument("--base_model", default=None,
                        help="the base model to merge into (default: the one the adapter names)")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES),
                        help="the merged weights' dtype (merging is done in float32)")
    parser.add_argument("--adapter_only", action="store_true", help="skip the merged model")
    arguments = parser.parse_args(argv)
    try:
        with confined_imports([arguments.output_dir, arguments.target_dir], STATE_FILE):
            return _export(arguments)
    except (ExportError, DamagedRunFolder, RefusedImport) as error:
        print(f"export error: {error}", file=sys.stderr)
        return 2


def _export(arguments: argparse.Namespace) -> int:
    found = find_adapter(arguments.output_dir, arguments.checkpoint, arguments.callback)
    check_target(arguments.output_dir, arguments.target_dir)
    print(f"checkpoint {found.checkpoint} of {found.store}")
    print(f"adapter: {export_adapter(found, arguments.target_dir / 'adapter')}")
    if not arguments.adapter_only:
        merged = export_merged(found, arguments.target_dir / "merged", arguments.base_model,
                               arguments.dtype)
        print(f"merged model: {merged}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
