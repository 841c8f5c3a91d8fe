//! The process's allocator: mimalloc, which keeps freed pages for 10 s before it gives them
//! back to the operating system.
//!
//! The service allocates small, short-lived buffers per request from many threads (measured in
//! `docs/performance.md`). mimalloc's default purge delay is 1 s: a page that stays free that
//! long is returned with `madvise`, and the next allocation there faults it in again. mimalloc
//! asks for transparent huge pages, so each such fault zeroes up to 2 MiB inside whatever
//! request triggered it: at 6,000 pairs/s that was 5 % of the process's CPU samples
//! (`clear_page_erms`) and about twice the page faults of a 10 s delay. Under a steady load a
//! page is reused long before 10 s; an idle process still returns its memory.
//!
//! Invariant: [`configure`] runs first in `main` (`entry.rs`), before any thread exists (mimalloc's option
//! setters are not thread-safe), and it never overrides the operator's `MIMALLOC_PURGE_DELAY`.

use std::os::raw::c_long;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in mimalloc v3's `mi_option_e` (`mimalloc.h`).
const PURGE_DELAY_OPTION: libmimalloc_sys::mi_option_t = 15;

/// How long a freed page stays with the process before it is purged.
pub const PURGE_DELAY_MS: c_long = 10_000;

/// Sets mimalloc's purge delay default (an environment variable still wins).
pub fn configure() {
    // SAFETY: `mi_option_set_default` only stores a value in mimalloc's option table; the index
    // is in range (below `_mi_option_last`, and mimalloc checks it too), and `main` calls this
    // before it starts any thread, so nothing reads the table concurrently.
    unsafe { libmimalloc_sys::mi_option_set_default(PURGE_DELAY_OPTION, PURGE_DELAY_MS) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The purge delay mimalloc uses.
    fn purge_delay_ms() -> c_long {
        // SAFETY: reads (and on first use initialises from the environment) one entry of
        // mimalloc's option table; the index is in range.
        unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY_OPTION) }
    }

    #[test]
    fn the_purge_delay_is_ten_seconds_unless_the_environment_says_otherwise() {
        configure();
        let expected = std::env::var("MIMALLOC_PURGE_DELAY")
            .ok()
            .and_then(|value| value.parse::<c_long>().ok())
            .unwrap_or(PURGE_DELAY_MS);
        assert_eq!(purge_delay_ms(), expected);
    }

    /// Runs the test above in a child process with `MIMALLOC_PURGE_DELAY` set: mimalloc reads
    /// that variable into `mi_option_purge_delay` only, so the child passes only if
    /// [`PURGE_DELAY_OPTION`] is that option's index.
    #[test]
    fn the_option_index_is_mimallocs_purge_delay() {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "allocator::tests::the_purge_delay_is_ten_seconds_unless_the_environment_says_otherwise",
                "--quiet",
            ])
            .env("MIMALLOC_PURGE_DELAY", "1234")
            .status()
            .unwrap();
        assert!(
            status.success(),
            "option {PURGE_DELAY_OPTION} is not the purge delay"
        );
    }
}
