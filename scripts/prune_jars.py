"""Delete jars from a folder when pyspark already ships an artifact of the same name."""

import re
import sys
from pathlib import Path

import pyspark

VERSIONED = re.compile(r"^(?P<name>.+?)-\d[\w.\-]*\.jar$")


def artifact(jar: Path) -> str:
    match = VERSIONED.match(jar.name)
    return match.group("name") if match else jar.stem


def main(folder: str) -> None:
    shipped = {artifact(j) for j in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    # Spark's own log4j binding is slf4j2; never add the slf4j1 one next to it.
    shipped |= {"log4j-slf4j-impl"}
    for jar in Path(folder).glob("*.jar"):
        if artifact(jar) in shipped:
            jar.unlink()


if __name__ == "__main__":
    main(sys.argv[1])
