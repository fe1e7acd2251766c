//! Upstream's router (skrouterd 3.5.1) for tests: where it is (as `tests/kubesim/cluster/upstream_peers.py` finds
//! it: `$UPSTREAM_PEERS`, else `shared/peers` beside the checkout or one level further up for a worktree), and a
//! running skrouterd with a given configuration, killed when dropped. Tests call [`home`] first and return early
//! (skipped, the reason printed) when it is `None`; `REQUIRE_UPSTREAM_PEERS=1` turns the absence into a failure.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub fn peers_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("UPSTREAM_PEERS").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let candidates = [repo.join("../shared/peers"), repo.join("../../shared/peers")];
    candidates.iter().find(|p| p.is_dir()).unwrap_or(&candidates[0]).clone()
}

/// skrouterd's home, or `None` with the reason printed (a failure when `REQUIRE_UPSTREAM_PEERS=1`).
pub fn home() -> Option<PathBuf> {
    let home = peers_dir().join("skupper-router-3.5.1");
    if home.join("sbin/skrouterd").is_file() {
        return Some(home);
    }
    let reason = format!("upstream's router is missing: {}/sbin/skrouterd does not exist", home.display());
    assert!(std::env::var("REQUIRE_UPSTREAM_PEERS").as_deref() != Ok("1"), "{reason} (REQUIRE_UPSTREAM_PEERS=1)");
    eprintln!("skipped: {reason} (../shared/peers/ beside the checkout, or $UPSTREAM_PEERS)");
    None
}

/// A running skrouterd; killed (and reaped) when dropped. Its log is `dir/skrouterd.log`.
pub struct Skrouterd {
    child: Child,
    pub dir: tempfile::TempDir,
}

impl Skrouterd {
    /// Starts skrouterd with `config` (the JSON list of entities its `-c` file holds).
    pub fn start(home: &Path, config: &serde_json::Value) -> Skrouterd {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skrouterd.json");
        std::fs::write(&path, config.to_string()).unwrap();
        let log = std::fs::File::create(dir.path().join("skrouterd.log")).unwrap();
        let child = Command::new(home.join("sbin/skrouterd"))
            .arg("-c")
            .arg(&path)
            .arg("-I")
            .arg(home.join("lib/skupper-router/python"))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("skrouterd starts");
        Skrouterd { child, dir }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("skrouterd.log")).unwrap_or_default()
    }
}

impl Drop for Skrouterd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // `SKROUTERD_KEEP_LOG=<dir>` keeps each skrouterd's log there (the temporary directory goes).
        if let Ok(keep) = std::env::var("SKROUTERD_KEEP_LOG") {
            let name = format!("skrouterd-{}.log", self.child.id());
            let _ = std::fs::copy(self.dir.path().join("skrouterd.log"), Path::new(&keep).join(name));
        }
    }
}
