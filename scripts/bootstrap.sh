#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian machine; idempotent and quick when done.
#   - Debian packages via apt, only if missing: redis-server (the stack), chromium (dashboard test),
#     wrk (HTTP benchmark), prometheus (promtool checks the alert rules), openssl (the
#     local stack makes its TLS certificates);
#   - the Python venv in .venv with pinned packages (pyproject.toml + constraints.txt);
#   - JVM jars resolved by Maven from Maven Central into the settings' jars folder (TRENDS_STACK__JARS,
#     default $TRENDS_HOME/jars, i.e. ./var/jars here): the Kafka broker, Delta Lake, and the JVM class
#     archive the batch jobs start from (<jars>/cds).
# Re-runs skip every step whose inputs have not changed (stamp files hold their checksums).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null 2>&1 || PY=python3

say() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*"; }

apt_packages=(redis-server redis-tools chromium wrk prometheus openssl)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  # Wait for another apt (unattended upgrades, a second bootstrap) instead of failing on its lock.
  lock=(-o DPkg::Lock::Timeout=600)
  $SUDO apt-get "${lock[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts a system redis on 6379; ours runs on its own port, so leave that one alone.
fi

stamp=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.stamp 2>/dev/null)" != "$stamp" ]; then
  say "installing Python packages into .venv (first time: a few minutes)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -c constraints.txt -e ".[dev]"
  echo "$stamp" > .venv/.stamp
fi

# The settings say where the jars go (read here, in the checkout, as the stack and the tests read them);
# an unknown TRENDS_ variable stops the bootstrap here too.
JARS=$(.venv/bin/python -c 'from trendcore.settings import Settings; print(Settings().stack.jars.absolute())')

fetch_jars() {  # name pom
  local dir="$JARS/$1" pom="infra/maven/$2"
  local want; want=$(sha256sum "$pom" | cut -c1-16)
  if [ "$(cat "$dir/.stamp" 2>/dev/null)" = "$want" ]; then return; fi
  say "resolving $1 jars with Maven into $dir"
  rm -rf "$dir"; mkdir -p "$dir"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$dir"
  echo "$want" > "$dir/.stamp"
}
fetch_jars kafka kafka-pom.xml
fetch_jars delta delta-pom.xml
# Spark ships most of Delta's transitive jars already; keep only artifacts it does not have, so two
# versions of one library never meet on the classpath.
.venv/bin/python scripts/prune_jars.py "$JARS/delta"
# The JVM class archive batch jobs start from (class data sharing: a faster job start),
# recorded once per JDK and jar set (about 2 min); without it the jobs still run, only slower.
.venv/bin/trends batch class-archive || say "class archive not recorded: batch jobs start without it"

# <jars>/s3: the S3A connector for an s3a://bucket/prefix lake, hadoop-aws 3.5.0 (the Hadoop Spark 4.2 ships)
# and the AWS SDK v2 bundle it names (about 690 MB, downloaded once); adapters/spark.py puts them on the
# driver's class path on local[*] and ships them with spark.jars to a cluster, only for an S3 lake.
# Pruned like the Delta jars (nothing of Spark's).
# <jars>/s3proxy: s3proxy, the S3-protocol server the tests start on loopback (tests/integration/s3server.py).
fetch_jars s3 s3-pom.xml
.venv/bin/python scripts/prune_jars.py "$JARS/s3"
fetch_jars s3proxy s3proxy-pom.xml
say "ready"
