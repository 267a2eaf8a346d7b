"""palette.py for the reference engine: set PALETTE_HOME to this folder, and a deck.py that runs
`$PALETTE_HOME/palette.py build-plan | edit-plan | build-deck ...` (IBM's own, or any fork) drives
pytest-palette's reference engine instead of the Palette service.

It runs under whichever interpreter deck.py chose; when that one cannot import pytest_palette, it hands over
to $PALETTE_PYTHON (the hosts set it to the harness's interpreter). Standard library only.
"""

import importlib.util
import os
import shutil
import sys


def main():
    if importlib.util.find_spec("pytest_palette") is not None:
        from pytest_palette.engine.cli import main as engine

        return engine(sys.argv[1:])
    wanted = os.environ.get("PALETTE_PYTHON", "").strip()
    python = shutil.which(os.path.expanduser(wanted)) if wanted else None
    # Paths, not real paths: a venv's python is a link to the base interpreter, yet sees other packages.
    if python and os.path.abspath(python) != os.path.abspath(sys.executable):
        os.execv(python, [python, "-u", "-m", "pytest_palette.engine"] + sys.argv[1:])
    sys.stderr.write(
        "error: {} cannot import pytest_palette, the reference engine, and PALETTE_PYTHON ({}) names no other "
        "interpreter: set PALETTE_PYTHON to a Python that has pytest-palette installed\n".format(
            sys.executable, wanted or "unset"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
