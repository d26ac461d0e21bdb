# Sourced by scripts/demo and scripts/test: create .venv and install the project into it.
# Re-installs only when pyproject.toml changed (a stamp file in .venv records its hash).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

extras="${1:-}"
if ! command -v java >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Java 17 (Spark needs a JVM)" >&2
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "error: Java 17 is required (e.g. apt-get install openjdk-17-jre-headless)" >&2
    exit 1
  fi
fi
if [ "$extras" = test ] && ! command -v chromium >/dev/null 2>&1; then
  # the report test renders report.html in headless Chromium; it is skipped if this fails
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Chromium for the report test" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; the report rendering test will be skipped" >&2
  fi
fi
python_bin="${PYTHON:-$(command -v python3.11 || command -v python3)}"
"$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "error: Python >= 3.11 is required ($python_bin is older)" >&2; exit 1; }
[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
hash="$(sha256sum < pyproject.toml | cut -c1-16)"
stamp=".venv/.installed-$hash${extras:+-$extras}"
# an install with extras (scripts/test's) holds everything a plain one needs
if [ ! -f "$stamp" ] && ! { [ -z "$extras" ] && compgen -G ".venv/.installed-$hash-*" >/dev/null; }; then
  echo "installing dpsmooth-spark${extras:+[$extras]} into .venv" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  # --no-compile: byte-compiling every installed module (pyspark's thousands) took two thirds of
  # the install (85 s -> 28 s); Python compiles what it imports, when it first does
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-compile -e ".${extras:+[$extras]}"
  touch "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
# Python caches the bytecode of what it imports (in __pycache__, ignored by git): with
# PYTHONDONTWRITEBYTECODE set, as some images set it, every process (each test worker, CLI run
# and Spark Python worker) compiled pyspark, pandas and scipy again, 2 s of every start-up
unset PYTHONDONTWRITEBYTECODE
