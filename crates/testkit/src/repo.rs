//! Files of the repository (examples, fixtures, docs), for tests that read them: the path is
//! resolved from this crate's own directory, so it is the same for every crate's tests.

use std::path::{Path, PathBuf};

/// The path of `path` (relative to the repository's root).
pub fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}
