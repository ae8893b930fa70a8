"""Where the project lives, for path defaults."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
