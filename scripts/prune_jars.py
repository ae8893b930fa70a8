"""Delete jars from a folder when pyspark already ships an artifact of the same name.

Run: .venv/bin/python scripts/prune_jars.py [folder]   (default: the settings' Delta jars, <jars>/delta;
scripts/bootstrap.sh passes the same folder)
"""

import re
import sys
from pathlib import Path

import pyspark

from trendcore.settings import Settings

VERSIONED = re.compile(r"^(?P<name>.+?)-\d[\w.\-]*\.jar$")


def artifact(jar: Path) -> str:
    match = VERSIONED.match(jar.name)
    return match.group("name") if match else jar.stem


def main(folder: str | Path) -> None:
    shipped = {artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    # Spark's own log4j binding is slf4j2; never add the slf4j1 one next to it.
    shipped |= {"log4j-slf4j-impl"}
    for jar in Path(folder).glob("*.jar"):
        if artifact(jar) in shipped:
            jar.unlink()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else Settings().stack.jars / "delta")
