//! Handing freed heap back to the OS.
//!
//! glibc keeps freed heap pages resident in its arenas until asked to return them.
//! Two moments leave a lot behind: Cranelift compiling a plugin (tens of MiB, freed at
//! once) and a burst of work such as the initial sync of many plugins. An idle host
//! should not carry either, so [`release`] runs after every compile and [`periodically`]
//! every half minute. On other allocators both are no-ops.

use std::time::Duration;

/// Why 30 s: a trim walks the arenas in well under a millisecond on an idle host, and
/// memory freed by a burst is back within half a minute of it.
pub const INTERVAL: Duration = Duration::from_secs(30);

/// Returns free heap pages to the OS now.
pub fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free heap pages to the OS; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Calls [`release`] every `every` on a blocking thread, for as long as the runtime lives.
pub fn periodically(every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let _ = tokio::task::spawn_blocking(|| {
                let _named = crate::thread_name::Named::now(c"wasmop-trim");
                release()
            })
            .await;
        }
    })
}
