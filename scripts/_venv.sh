# Sourced by scripts/*: creates .venv with the project and its dev tools installed, once per pyproject change.
PY=${PYTHON:-python3}
# Debian packages (haproxy for the service-network router, wrk for its benchmark), installed when missing and root
"$(dirname "${BASH_SOURCE[0]:-$0}")/setup-system"
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[dev]'
  rm -f .venv/.installed-*; touch "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"
