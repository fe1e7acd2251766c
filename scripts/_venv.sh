# Sourced by scripts/*: creates .venv with the project and its dev tools installed, once per pyproject change,
# and puts the pinned Helm and csi-sanity into .venv/bin (scripts/install-helm, scripts/install-csi-sanity), once per
# change of those scripts.
PY=${PYTHON:-python3}
# Debian packages the tests use (curl), installed when missing and root (scripts/setup-system)
"$(dirname "${BASH_SOURCE[0]:-$0}")/setup-system"
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[dev]'
  rm -f .venv/.installed-*; touch "$stamp"
fi
helm_stamp=.venv/.helm-$(sha256sum scripts/install-helm | cut -c1-16)
if [ ! -f "$helm_stamp" ]; then
  scripts/install-helm .venv/bin
  rm -f .venv/.helm-*; touch "$helm_stamp"
fi
# csi-sanity (scripts/install-csi-sanity), built with Go: without Go this only warns, and the test that runs it
# fails saying how to install it, so the rest of the project still works on a machine without Go.
sanity_stamp=.venv/.csi-sanity-$(sha256sum scripts/install-csi-sanity | cut -c1-16)
if [ ! -f "$sanity_stamp" ]; then
  if scripts/install-csi-sanity .venv/bin; then
    rm -f .venv/.csi-sanity-*; touch "$sanity_stamp"
  else
    echo "_venv.sh: csi-sanity not installed (scripts/install-csi-sanity); tests/install/test_csi_sanity.py will fail" >&2
  fi
fi
export PATH="$PWD/.venv/bin:$PATH"
# The service network's router (Rust, router/): built with the locked dependencies on every run (a no-op when
# nothing changed); Python finds it through ROUTER_BIN (service_network.router.dataplane.router_binary).
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: the service network's router is written in Rust; install a stable toolchain" >&2
  return 1 2>/dev/null || exit 1
fi
cargo build --release --locked --quiet --manifest-path router/Cargo.toml
export ROUTER_BIN="$PWD/router/target/release/service-network-router"
