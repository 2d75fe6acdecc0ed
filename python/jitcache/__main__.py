"""``python -m jitcache ...`` and the ``jitcache`` console command: run the bundled CLI.

The CLI is ``<package>/bin/jitcache`` unless JITCACHE_CLI names another. It replaces this
process (os.execv), so its output, signals and exit code are the command's own. Run from a
virtual environment that is not activated, it is told the environment (VIRTUAL_ENV), so
that it opens the same NVIDIA pip compilers (nvidia-cuda-nvrtc, nvidia-nvjitlink,
nvidia-cuda-nvcc) as the library in this interpreter does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV_CLI = "JITCACHE_CLI"


def cli_path() -> Path:
    """The CLI binary this command runs."""
    given = os.environ.get(ENV_CLI, "").strip()
    if given:
        return Path(given)
    return Path(__file__).resolve().parent / "bin" / "jitcache"


def main(argv: list[str] | None = None) -> int:
    """Execs the CLI with argv (default sys.argv[1:]); returns 2 only if it cannot be run."""
    args = list(sys.argv[1:] if argv is None else argv)
    path = cli_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        how = f"${ENV_CLI}" if os.environ.get(ENV_CLI, "").strip() else "the bundled copy"
        print(
            f"jitcache: error: the CLI {path} ({how}) is missing or not executable; "
            f"reinstall the package or set {ENV_CLI} to the jitcache binary",
            file=sys.stderr,
        )
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    if sys.prefix != sys.base_prefix and not os.environ.get("VIRTUAL_ENV", "").strip():
        os.environ["VIRTUAL_ENV"] = sys.prefix
    try:
        os.execv(path, ["jitcache", *args])
    except OSError as exc:
        print(f"jitcache: error: cannot run {path}: {exc}", file=sys.stderr)
        return 2
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
