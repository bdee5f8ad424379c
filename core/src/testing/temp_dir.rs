//! A uniquely named scratch directory, removed on drop.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh directory under [`std::env::temp_dir`], unique within and across processes, deleted
/// with everything in it when dropped (unless [`TempDir::keep`] is called).
///
/// Drop every store opened inside it first: the directory goes when this value does.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl TempDir {
    /// Creates `<temp>/ironbus-<label>-<pid>-<nanos>-<n>`.
    ///
    /// # Panics
    /// When the directory cannot be created.
    #[allow(clippy::disallowed_methods, reason = "the time only makes the directory's name unique")]
    pub fn new(label: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "ironbus-{label}-{}-{nanos}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create test directory {}: {e}", path.display()));
        Self { path, keep: false }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leaves the directory in place when dropped (to inspect it after a failure) and returns it.
    pub fn keep(mut self) -> PathBuf {
        self.keep = true;
        self.path.clone()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            // Best effort: a leftover directory in the temp dir harms nothing.
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
