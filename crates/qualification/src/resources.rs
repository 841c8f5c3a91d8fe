//! Host resource samples: peak resident memory and process CPU time, read from `/proc` (Linux).
//!
//! These are not deterministic and are never compared between runs; they are compared with the
//! manifest's heap and CPU bounds. On a system without `/proc` they read as zero, and the record
//! says so in `resources.source`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// Peak resident set size of the process (VmHWM), MiB.
    pub peak_memory_mib: f64,
    /// CPU time (user + system) the run used, ms.
    pub cpu_time_ms: f64,
    /// `cpuTimeMs / virtualDurationMs × 100`: one-core utilisation at the declared arrival rate.
    pub cpu_percent_one_core: f64,
    /// Where the samples come from.
    pub source: String,
}

/// Process CPU time (user + system) in ms, if readable.
pub fn process_cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // Clock ticks are 100 per second on Linux (USER_HZ); this is fixed by the kernel ABI.
    Some((utime + stime) * 10.0)
}

/// Peak resident memory (VmHWM) in MiB, if readable.
pub fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// A CPU stopwatch over the process.
pub struct CpuStopwatch {
    start: Option<f64>,
    wall: std::time::Instant,
}

impl CpuStopwatch {
    pub fn start() -> Self {
        CpuStopwatch {
            start: process_cpu_ms(),
            wall: std::time::Instant::now(),
        }
    }

    /// Samples the resources used since `start` over `virtual_duration_ms` of virtual time.
    pub fn finish(&self, virtual_duration_ms: u64) -> Resources {
        let (cpu_time_ms, source) = match (self.start, process_cpu_ms()) {
            (Some(start), Some(end)) => {
                // /proc counts 10 ms ticks; for a run of a few ticks, the wall clock of this
                // single-threaded run is the tighter upper bound.
                let wall = self.wall.elapsed().as_secs_f64() * 1000.0;
                let ticks = end - start;
                if ticks < 50.0 {
                    (wall, "proc-ticks-too-coarse-wall-clock".to_owned())
                } else {
                    (ticks, "proc".to_owned())
                }
            }
            _ => (
                self.wall.elapsed().as_secs_f64() * 1000.0,
                "wall-clock".to_owned(),
            ),
        };
        let cpu_percent = if virtual_duration_ms == 0 {
            0.0
        } else {
            cpu_time_ms / virtual_duration_ms as f64 * 100.0
        };
        Resources {
            peak_memory_mib: crate::observations::round6(peak_memory_mib().unwrap_or(0.0)),
            cpu_time_ms: crate::observations::round6(cpu_time_ms),
            cpu_percent_one_core: crate::observations::round6(cpu_percent),
            source,
        }
    }
}
