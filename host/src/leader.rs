//! Leader election over a coordination.k8s.io/v1 Lease, the protocol client-go's
//! `leaderelection` and controller-runtime use, so their tooling reads it the same way.
//!
//! Flow: a candidate tries every `retry_period` to take the Lease — it succeeds when
//! the Lease is absent, held by itself, released (no holder), or has not been renewed
//! for `lease_duration` *as observed on this candidate's own clock* (no trust in other
//! replicas' clocks). The leader renews every `retry_period`; when it could not renew
//! for `renew_deadline` it considers itself deposed. Why 15 s / 10 s / 2 s:
//! controller-runtime's defaults, which tolerate an apiserver blip without churn.
//!
//! Guarantee: with `renew_deadline` < `lease_duration`, a deposed leader stops before
//! any other candidate can see the Lease expire (a renewal unanswered at the deadline
//! counts as failed; the caller then has the difference to abort its work). Caveat: that holds only while the
//! replicas' clocks *advance* at the same rate (they need not agree on the time).

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (the Pod name), written as `holderIdentity`.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Config {
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Config {
            namespace: namespace.into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    #[error("lease {0}: {1}")]
    Api(String, kube::Error),
}

/// One candidate. See the module docs.
pub struct Elector {
    api: Api<Lease>,
    cfg: Config,
    /// The last Lease seen and when this replica first saw it in that state.
    observed: Option<(LeaseSpec, Instant)>,
    /// When the last successful take or renewal was sent: what the renew deadline
    /// counts from (sent, not answered: others may see the renewal from then on).
    renewed: Instant,
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl Elector {
    pub fn new(client: kube::Client, cfg: Config) -> Self {
        Elector { api: Api::namespaced(client, &cfg.namespace), cfg, observed: None, renewed: Instant::now() }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Returns once this replica holds the Lease.
    pub async fn acquire(&mut self) {
        loop {
            let sent = Instant::now();
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    self.renewed = sent;
                    tracing::info!(lease = %self.cfg.name, identity = %self.cfg.identity, "became the leader");
                    crate::metrics::METRICS.leader.set(1);
                    return;
                }
                Ok(false) => {}
                Err(e) => tracing::debug!("leader election: {e}"),
            }
            tokio::time::sleep(self.cfg.retry_period).await;
        }
    }

    /// Renews until renewing has failed for `renew_deadline`; returns when leadership
    /// is lost. Run it beside the leader's work and stop the work when it returns.
    /// An attempt still unanswered at the deadline is given up: a hung apiserver must
    /// not keep this replica leading past the point where others may take over.
    pub async fn hold(&mut self) {
        loop {
            tokio::time::sleep(self.cfg.retry_period).await;
            let left = self.cfg.renew_deadline.saturating_sub(self.renewed.elapsed());
            let sent = Instant::now();
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => self.renewed = sent,
                Ok(Ok(false)) => {
                    tracing::warn!(lease = %self.cfg.name, "another replica took the lease");
                    break;
                }
                Ok(Err(e)) => tracing::warn!("cannot renew the lease: {e}"),
                Err(_) => tracing::warn!("renewing the lease timed out"),
            }
            if self.renewed.elapsed() >= self.cfg.renew_deadline {
                tracing::warn!(lease = %self.cfg.name, "lease not renewed within the renew deadline");
                break;
            }
        }
        crate::metrics::METRICS.leader.set(0);
    }

    /// Gives the Lease up so a standby takes over at once instead of after expiry.
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else { return };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(&self.cfg.identity) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        match self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
            Ok(_) => tracing::info!(lease = %self.cfg.name, "released the lease"),
            Err(e) => tracing::warn!("cannot release the lease (standbys take over after it expires): {e}"),
        }
        crate::metrics::METRICS.leader.set(0);
    }

    /// true: this replica holds the Lease now.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderError> {
        let id = format!("{}/{}", self.cfg.namespace, self.cfg.name);
        let e = move |err| LeaderError::Api(id.clone(), err);
        let me = self.cfg.identity.clone();
        let secs = self.cfg.lease_duration.as_secs() as i32;
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await.map_err(&e)? else {
            let mut lease = Lease::default();
            lease.metadata.name = Some(self.cfg.name.clone());
            lease.spec = Some(LeaseSpec {
                holder_identity: Some(me),
                lease_duration_seconds: Some(secs),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..Default::default()
            });
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(l) => {
                    self.observe(l.spec.unwrap_or_default());
                    Ok(true)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(err) => Err(e(err)),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(spec.clone());
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let held_by_me = holder == me;
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(secs).max(0) as u64);
        let expired = self.observed.as_ref().is_some_and(|(_, at)| at.elapsed() >= duration);
        if !held_by_me && !holder.is_empty() && !expired {
            return Ok(false);
        }
        let mut next = spec;
        if !held_by_me {
            next.acquire_time = Some(now());
            next.lease_transitions = Some(next.lease_transitions.unwrap_or(0) + 1);
        }
        next.holder_identity = Some(me);
        next.lease_duration_seconds = Some(secs);
        next.renew_time = Some(now());
        lease.spec = Some(next);
        // resourceVersion is kept: if anyone wrote the Lease since we read it, this
        // fails with a conflict and we try again next period.
        match self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
            Ok(l) => {
                self.observe(l.spec.unwrap_or_default());
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(err) => Err(e(err)),
        }
    }

    /// Restarts the expiry clock whenever the Lease changed since last seen.
    fn observe(&mut self, spec: LeaseSpec) {
        if self.observed.as_ref().map(|(s, _)| s) != Some(&spec) {
            self.observed = Some((spec, Instant::now()));
        }
    }
}
