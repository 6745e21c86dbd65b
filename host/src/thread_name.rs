//! Naming a pooled thread for the work it does, while it does it.
//!
//! Why: tokio names every blocking-pool thread like its workers (`tokio-rt-worker`), so
//! per-thread CPU (`top -H`, `/proc/PID/task/*/stat`, `scripts/bench-abuse.py`'s
//! table) cannot tell a plugin compile from the runtime's own work. A compile renames
//! its thread for as long as it runs and gives the old name back after, so the pool
//! thread serves its next job under its usual name.
//!
//! Caveat: Linux keeps 15 bytes of a name; a sampler sees the name a thread has at the
//! moment it looks, so CPU is counted under the name held when sampled.

use std::ffi::CStr;

/// The calling thread's name, restored when dropped (on the same thread: not `Send`).
pub struct Named([u8; 16], std::marker::PhantomData<*const ()>);

impl Named {
    /// Renames the calling thread `name` (at most 15 bytes are kept) until dropped.
    pub fn now(name: &CStr) -> Named {
        let mut old = [0u8; 16];
        #[cfg(target_os = "linux")]
        // SAFETY: PR_GET_NAME writes at most 16 bytes (NUL included) to a 16-byte buffer;
        // PR_SET_NAME reads a NUL-terminated string; both act on the calling thread only.
        unsafe {
            libc::prctl(libc::PR_GET_NAME, old.as_mut_ptr());
            libc::prctl(libc::PR_SET_NAME, name.as_ptr());
        }
        #[cfg(not(target_os = "linux"))]
        let _ = name;
        Named(old, std::marker::PhantomData)
    }
}

impl Drop for Named {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: the buffer came from PR_GET_NAME, NUL-terminated within 16 bytes.
        unsafe {
            libc::prctl(libc::PR_SET_NAME, self.0.as_ptr());
        }
    }
}

/// Returns once no thread of this process is named `name` (a test's check that the
/// threads of something it dropped ended); panics after 10 s.
#[cfg(test)]
pub(crate) async fn until_none_named(name: &str) {
    let gone = std::time::Instant::now();
    while std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .any(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == name))
    {
        assert!(gone.elapsed() < std::time::Duration::from_secs(10), "{name} threads are still running");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn own_name() -> String {
        std::fs::read_to_string("/proc/thread-self/comm").unwrap().trim_end().to_owned()
    }

    #[test]
    fn a_thread_carries_the_name_while_named_and_its_own_after() {
        std::thread::Builder::new()
            .name("pool-thread".into())
            .spawn(|| {
                {
                    let _named = Named::now(c"wasmop-compile");
                    assert_eq!(own_name(), "wasmop-compile");
                }
                assert_eq!(own_name(), "pool-thread");
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
