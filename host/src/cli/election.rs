//! `wasmop run`'s leader-election flags, and running the controllers only while leader.

use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use wasmop::controllers::{Manager, Shared};
use wasmop::leader::{Config, Elector};
use wasmop::registry::Registry;

#[derive(clap::Args)]
pub struct ElectionArgs {
    /// Reconcile only while holding a Lease, so several replicas can run (all serve webhooks).
    #[arg(long, env = "WASMOP_LEADER_ELECT")]
    leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, env = "WASMOP_LEADER_ELECTION_ID", default_value = "wasmop")]
    leader_election_id: String,
    /// Namespace of the Lease (default: $POD_NAMESPACE or "default").
    #[arg(long, env = "WASMOP_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// How long a standby waits, after the last renewal it saw, before taking the Lease.
    #[arg(long, env = "WASMOP_LEADER_ELECTION_LEASE_DURATION_SECONDS", default_value_t = 15)]
    leader_election_lease_duration_seconds: u64,
    /// How long the leader keeps trying to renew before it stops reconciling (below the lease duration).
    #[arg(long, env = "WASMOP_LEADER_ELECTION_RENEW_DEADLINE_SECONDS", default_value_t = 10)]
    leader_election_renew_deadline_seconds: u64,
    /// How often candidates try to take, and the leader to renew, the Lease.
    #[arg(long, env = "WASMOP_LEADER_ELECTION_RETRY_PERIOD_SECONDS", default_value_t = 2)]
    leader_election_retry_period_seconds: u64,
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Runs the controllers until `stop` turns true: at once without leader election, or
/// in turns of leadership with it. On stop, in-flight reconciles get `grace` to finish
/// (the leader renewing meanwhile); then whatever still runs is aborted and the Lease
/// released.
///
/// Deposed (renewing failed for the renew deadline, or another replica took the
/// Lease), the controllers are aborted and awaited before this replica tries to lead
/// again: no reconcile of it may run once another replica can lead. That leaves
/// `lease_duration - renew_deadline` (5 s by default) for the abort, which cancels each
/// reconcile at its next await and so takes milliseconds; the time is logged.
pub async fn run_controllers(
    args: &ElectionArgs,
    client: kube::Client,
    identity: &str,
    shared: Arc<Shared>,
    registry: Arc<Registry>,
    stop: watch::Receiver<bool>,
    grace: Duration,
) -> anyhow::Result<()> {
    if !args.leader_elect {
        Manager::new(shared).run(registry, stopped(stop), std::future::pending()).await;
        return Ok(());
    }
    if args.leader_election_renew_deadline_seconds >= args.leader_election_lease_duration_seconds {
        anyhow::bail!("--leader-election-renew-deadline-seconds must be below the lease duration");
    }
    let ns = args
        .leader_election_namespace
        .clone()
        .unwrap_or_else(|| std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".into()));
    let mut cfg = Config::new(&ns, &args.leader_election_id, identity);
    cfg.lease_duration = Duration::from_secs(args.leader_election_lease_duration_seconds);
    cfg.renew_deadline = Duration::from_secs(args.leader_election_renew_deadline_seconds);
    cfg.retry_period = Duration::from_secs(args.leader_election_retry_period_seconds);
    tracing::info!(lease = %format!("{ns}/{}", cfg.name), identity, "waiting to become the leader");
    let margin = cfg.lease_duration.saturating_sub(cfg.renew_deadline);
    let mut elector = Elector::new(client, cfg);
    loop {
        tokio::select! {
            _ = elector.acquire() => {}
            _ = stopped(stop.clone()) => return Ok(()),
        }
        let (depose, deposed) = tokio::sync::oneshot::channel::<()>();
        let deposed = async {
            let _ = deposed.await;
        };
        let manager = Manager::new(shared.clone()).run(registry.clone(), stopped(stop.clone()), deposed);
        tokio::pin!(manager);
        tokio::select! {
            _ = elector.hold() => {
                let started = Instant::now();
                let _ = depose.send(());
                // Another replica may lead once the Lease expires: if the abort has not
                // ended by then, the process ends instead (as controller-runtime does).
                if tokio::time::timeout(margin, manager.as_mut()).await.is_err() {
                    tracing::error!(?margin, "lost leadership and reconciles did not end in time: exiting");
                    std::process::exit(1);
                }
                tracing::warn!(took = ?started.elapsed(), "lost leadership: in-flight reconciles aborted; waiting to lead again");
            }
            // Only on stop (or when the registry goes away): nothing left to lead.
            _ = &mut manager => {
                elector.release().await;
                return Ok(());
            }
            _ = stopped(stop.clone()) => {
                let why = tokio::select! {
                    r = tokio::time::timeout(grace, manager.as_mut()) => r.err().map(|_| "grace period over"),
                    _ = elector.hold() => Some("lost leadership"),
                };
                if let Some(why) = why {
                    let started = Instant::now();
                    let _ = depose.send(());
                    manager.as_mut().await;
                    tracing::warn!(?grace, took = ?started.elapsed(), "{why} with reconciles still running: aborted them");
                }
                elector.release().await;
                return Ok(());
            }
        }
    }
}
