//! Sources run apart: on a thread of their own (`wasmop-sources`, its own
//! single-threaded tokio runtime) at a lower CPU priority than the threads that serve
//! reviews and reconciles.
//!
//! Why: a source's work grows with what anyone who may write a plugin ConfigMap sends,
//! not with what the host serves. Each watch event of a ConfigMap holding a 1 MiB
//! plugin is 1.4 MB of JSON to parse, base64 to decode and bytes to hash, and it comes
//! on every write, loaded or not (the driver then drops all but the newest, see
//! `driver`); a relist after a watch restart brings every plugin ConfigMap at once.
//! Measured: about 1.4 ms of CPU per such event (the sources thread used 0.25 s while
//! a ConfigMap was rewritten ~180 times, BENCHMARKS.md, issue 18, seventh part), so
//! this is not what a rewrite loop costs a healthy webhook plugin; it keeps that work,
//! however much of it comes, from ever standing between two reviews. On a thread of
//! its own at [`SOURCES_NICE`] the kernel preempts it whenever the runtime thread has
//! a review.
//!
//! Flow: the sources' futures run on this thread; the events they send cross to the
//! driver (`driver`, on the host's runtime) over a channel. The ConfigMap source builds
//! its own cluster client here, so its connections (TLS, reads, JSON) are this
//! thread's too, and no request of the host's own is ever served over one of them.
//!
//! Caveats: on a host whose cores are all busy, a new version is read at about a
//! tenth of a core (a 1 MiB plugin's event in ~15 ms instead of ~1.4), and the watch
//! may fall behind a ConfigMap rewritten in a loop; each event still carries the
//! plugin's whole state, so the newest one read wins as before. The thread ends when
//! every source has ended or the driver has gone.

use super::{PluginSource, SourceEvent};
use tokio::sync::mpsc;

/// The sources thread's nice value. Why 10: about a tenth of a busy core (weight 110
/// against 1024), so a load still goes on while reviews saturate the host, at full
/// speed on a quiet one. Not idle priority (`runtime::Priority::Idle`): an admin's new
/// plugin version has no fallback that would load it meanwhile.
pub const SOURCES_NICE: i32 = 10;

/// Runs `sources` on the sources thread, each sending to `tx`, until all of them end
/// or `tx`'s receiver is dropped.
pub fn run_apart(sources: Vec<Box<dyn PluginSource>>, tx: mpsc::Sender<SourceEvent>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    crate::runtime::niced_thread("wasmop-sources", crate::runtime::Priority::Nice(SOURCES_NICE), move || {
        rt.block_on(async move {
            let all = futures::future::join_all(sources.into_iter().map(|s| s.run(tx.clone())));
            tokio::select! {
                _ = all => {}
                _ = tx.closed() => {}
            }
        });
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends one event from the thread it runs on, with that thread's name and nice.
    struct Where;

    #[async_trait::async_trait]
    impl PluginSource for Where {
        async fn run(self: Box<Self>, tx: mpsc::Sender<SourceEvent>) {
            let nice = crate::runtime::own_priority();
            let name = std::thread::current().name().unwrap_or_default().to_owned();
            let ev = SourceEvent::Remove { name: format!("{name} {nice}"), origin: String::new(), origin_object: None };
            let _ = tx.send(ev).await;
        }
    }

    /// Never ends: only the driver going away stops it.
    struct Forever;

    #[async_trait::async_trait]
    impl PluginSource for Forever {
        async fn run(self: Box<Self>, _tx: mpsc::Sender<SourceEvent>) {
            std::future::pending::<()>().await;
        }
    }

    #[tokio::test]
    async fn sources_run_on_a_niced_thread_of_their_own_and_stop_when_the_driver_goes() {
        let (tx, mut rx) = mpsc::channel(4);
        run_apart(vec![Box::new(Where), Box::new(Forever)], tx).unwrap();
        let Some(SourceEvent::Remove { name, .. }) = rx.recv().await else { panic!("no event") };
        let (thread, nice) = name.split_once(' ').unwrap();
        assert_eq!(thread, "wasmop-sources");
        assert!(nice.parse::<i32>().unwrap() >= SOURCES_NICE, "nice {nice}");
        // The driver goes: the thread ends although `Forever` never would.
        drop(rx);
        crate::thread_name::until_none_named("wasmop-sources").await;
    }
}
