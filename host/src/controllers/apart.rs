//! Reconciles run apart: every controller (its watches, its queue, its workers and the
//! plugin calls and requests they make) runs on a runtime of its own, whose threads the
//! kernel ranks below the threads that serve webhooks.
//!
//! Why: an admission webhook sits in the path of every Pod the cluster creates and is
//! waited on; a reconcile is eventually consistent and nobody waits on its millisecond.
//! On one runtime the two took turns as equals, so a reconcile burst's work stood
//! between reviews at their own rank. On threads of their own at nice 5 they get about
//! a quarter of a core that reviews keep busy (weight 335 against 1024), and a review
//! thread that wakes runs at the next scheduler tick at the latest.
//! Measured (BENCHMARKS.md, issue 23, 2026-12-07): 100 Memcacheds created beside 5,000
//! SidecarSet reviews/s cost these threads 0.34–0.55 s of CPU per 10 s run; the
//! reviews' p99 in those runs did not move beyond this machine's spread, so what holds
//! that tail is elsewhere (the control plane on the load's core, the hypervisor), and
//! this is the rank a webhook host owes its webhooks rather than a measured cure.
//!
//! Flow: [`super::Running::spawn`] spawns each controller here; whatever a controller
//! spawns (its workers, its requeue timers) is this runtime's too, and so are the
//! controllers' cluster clients (`KubeBackend::with_own_clients`, made here): a
//! client's request queue and connections are served by the runtime that made them,
//! so reviews, on clients of their own, never wait on a reconcile thread. The manager
//! and the Lease stay on the host's runtime, so leadership is renewed at the host's
//! own rank. A plugin call that computes long still moves to the aside threads
//! (`runtime::aside`), from here as from anywhere.
//!
//! Caveats:
//! - While webhooks keep every core busy, reconciles get the share the nice value
//!   leaves them (at the default 5 about a quarter of a core, at 10 a tenth; at `idle`
//!   only what the webhooks leave, so a flood of reviews can hold every reconcile back
//!   until its deadline). On a host that is not saturated they run at once.
//! - A reconcile thread preempted while it holds a lock that reviews take holds them
//!   up until it runs again: a watch cache's, which two controller steps hold for a
//!   pass over the whole cache (a re-list's gone objects, a resync's keys), so on a
//!   saturated core a review reading that cache may wait a tick then. A selector's
//!   matches, run on every event of a watched kind, are found outside the lock.
//! - Each plugin identity has two sets of connections to the apiserver, one for its
//!   reconciles and one for its reviews.
//! - A deposed leader aborts its reconciles on these threads within the Lease's margin
//!   (5 s by default) or exits (`cli::election`); at `idle` under a flood of reviews
//!   they may not run in time, and the host then exits, webhooks included. Keep a nice
//!   value with `--leader-elect`.

use crate::runtime::Priority;

/// The reconcile threads' rank by default. Why nice 5: weight 335 against a review
/// thread's 1024, so while reviews saturate a core reconciles still get about a
/// quarter of it (a burst finishes, a deadline of 30 s holds), and a review thread
/// that wakes runs at the next scheduler tick at the latest. Lower than the aside
/// threads' 10: a short reconcile ranks above a long call.
pub const RECONCILE_PRIORITY: Priority = Priority::Nice(5);

/// The runtime controllers run on; dropping it lets its threads end (without waiting
/// for them, so it may be dropped inside async code).
pub struct Apart {
    rt: Option<tokio::runtime::Runtime>,
}

impl Apart {
    /// `threads` worker threads (and blocking threads) named `wasmop-recon` at
    /// `priority`.
    pub fn start(threads: usize, priority: Priority) -> std::io::Result<Apart> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("wasmop-recon")
            .on_thread_start(move || priority.lower_own())
            .enable_all()
            .build()?;
        Ok(Apart { rt: Some(rt) })
    }

    /// Where controllers are spawned (see [`super::Shared::reconciles`]).
    pub fn handle(&self) -> tokio::runtime::Handle {
        self.rt.as_ref().expect("running until dropped").handle().clone()
    }
}

impl Drop for Apart {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The thread's name and nice value, from the thread a task runs on.
    fn here() -> (String, i32) {
        (std::thread::current().name().unwrap_or_default().to_owned(), crate::runtime::own_priority())
    }

    #[tokio::test]
    async fn controllers_and_what_they_spawn_run_on_niced_threads_of_their_own() {
        let (_, before) = here();
        let apart = Apart::start(2, Priority::Nice(7)).unwrap();
        // A controller spawned there, and a worker it spawns in turn (as `controller`
        // spawns its workers with tokio::spawn).
        let (name, nice, inner) = apart
            .handle()
            .spawn(async {
                let (name, nice) = here();
                let inner = tokio::spawn(async { here() }).await.unwrap();
                (name, nice, inner)
            })
            .await
            .unwrap();
        assert_eq!(name, "wasmop-recon");
        assert_eq!(inner.0, "wasmop-recon");
        assert!(nice >= 7 && inner.1 >= 7, "nice {nice}, {}", inner.1);
        // The caller's own thread is untouched.
        assert_eq!(here().1, before);
        // Dropped inside async code: returns, and the threads end.
        drop(apart);
        crate::thread_name::until_none_named("wasmop-recon").await;
    }
}
