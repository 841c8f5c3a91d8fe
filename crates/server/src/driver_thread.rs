//! The driver runs on an OS thread of its own, with a single-threaded runtime, not as a task
//! among the connections on the service's worker threads.
//!
//! Why: every admission and release goes through the one driver, so whatever descheduling the
//! driver suffers, every request waits for. As a task on a worker thread, it shared a thread
//! that was busy with connections: the thread used up its time slice and the kernel preempted
//! it, often in the middle of the driver's poll (a lease log `write(2)`), for a whole
//! scheduler tick (4 ms at HZ 250): the tail stalls of `docs/performance.md`. On a thread of
//! its own the driver sleeps between batches, so the scheduler treats it as an interactive
//! thread: it runs as soon as a command wakes it and rarely exhausts a slice.
//!
//! Invariants: the driver's timers run on this thread's runtime (the clock's instants are
//! tokio instants, shared by every runtime of the process); what the driver's journal spawns
//! goes to the service's runtime (`StoreJournal` holds its handle), never to this thread;
//! [`DriverThread::join`] returns once the driver's `run` returned (after its last flush).

use std::future::Future;

use tokio::sync::oneshot;

/// The running driver thread.
pub struct DriverThread {
    finished: oneshot::Receiver<()>,
}

impl DriverThread {
    /// Starts `driver` (the driver's `run` future) on a new thread named `turnstile-driver`.
    pub fn spawn(
        driver: impl Future<Output = ()> + Send + 'static,
    ) -> Result<DriverThread, std::io::Error> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let (done, finished) = oneshot::channel();
        std::thread::Builder::new()
            .name("turnstile-driver".into())
            .spawn(move || {
                runtime.block_on(driver);
                let _ = done.send(());
            })?;
        Ok(DriverThread { finished })
    }

    /// Waits for the driver to stop (a panicked driver counts as stopped).
    pub async fn join(self) {
        let _ = self.finished.await;
    }
}
