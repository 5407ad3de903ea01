"""Example outputs committed under reports/examples/, written by the tests that produce them when
LOADREPRO_WRITE_EXAMPLES is set, with this machine's paths replaced by what a reader would type."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "reports" / "examples"
ENGINE_CACHE = Path(os.environ.get("LOADREPRO_ENGINE_CACHE", Path.home() / ".cache" / "loadrepro-engines"))
# What no committed example may carry: an absolute path of the machine it was made on.
MACHINE_PATH = re.compile(r"(?<![\w.~$])/(?:tmp|root|home|work|var|usr|opt)/[\w.-]")


def portable(text: str, run_root: Path | None = None) -> str:
    """`text` with the run folder, the checkout, the engine cache and the interpreter as a reader would write them."""
    swaps = [(sys.executable, "python"), (str(ENGINE_CACHE), "~/.cache/loadrepro-engines"), (str(ROOT) + "/", ""),
             (str(ROOT), ".")]
    if run_root is not None:
        swaps.insert(0, (str(run_root), "runs"))
    for real, shown in swaps:
        text = text.replace(real, shown)
    return text


def save_example(name: str, text: str, run_root: Path | None = None) -> None:
    if os.environ.get("LOADREPRO_WRITE_EXAMPLES"):
        (EXAMPLES / name).write_text(portable(text, run_root))
