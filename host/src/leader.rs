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
    ///
    /// A renewal may still land after the read here: the stop path drops `hold` while
    /// a renewal is in flight, and the apiserver may apply it after this replica's
    /// read. The write then fails with a conflict, so it reads again and retries (a
    /// few times; each try is one read and one write). It never writes a Lease that
    /// another replica holds.
    pub async fn release(&mut self) {
        const TRIES: usize = 5;
        for attempt in 1..=TRIES {
            let mut lease = match self.api.get_opt(&self.cfg.name).await {
                Ok(Some(lease)) => lease,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("cannot read the lease to release it (standbys take over after it expires): {e}");
                    break;
                }
            };
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(&self.cfg.identity) {
                break;
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now());
            match self.api.replace(&self.cfg.name, &PostParams::default(), &lease).await {
                Ok(_) => {
                    tracing::info!(lease = %self.cfg.name, "released the lease");
                    break;
                }
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < TRIES => {
                    tracing::debug!(lease = %self.cfg.name, attempt, "lease changed while releasing it; reading it again");
                }
                Err(e) => {
                    tracing::warn!("cannot release the lease (standbys take over after it expires): {e}");
                    break;
                }
            }
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

#[cfg(test)]
mod tests {
    //! `release` against a fake apiserver that holds one Lease and answers GET and PUT
    //! with resourceVersion checks, as the real one does.
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use std::sync::{Arc, Mutex};

    struct Fake {
        lease: serde_json::Value,
        rv: u64,
        /// PUTs to refuse first, each as if another write (an in-flight renewal) had
        /// landed just before it.
        conflicts: u32,
        puts: u32,
    }

    fn elector(holder: &str, conflicts: u32) -> (Elector, Arc<Mutex<Fake>>) {
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l", "namespace": "ns"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        });
        let fake = Arc::new(Mutex::new(Fake { lease, rv: 1, conflicts, puts: 0 }));
        let state = fake.clone();
        let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let state = state.clone();
            async move {
                let put = req.method() == http::Method::PUT;
                let body = req.into_body().collect().await?.to_bytes();
                let mut f = state.lock().unwrap();
                let (code, out) = if !put {
                    let mut l = f.lease.clone();
                    l["metadata"]["resourceVersion"] = f.rv.to_string().into();
                    (200, l)
                } else {
                    f.puts += 1;
                    let sent: serde_json::Value = serde_json::from_slice(&body)?;
                    let fresh = sent["metadata"]["resourceVersion"] == f.rv.to_string().as_str();
                    if f.conflicts > 0 || !fresh {
                        f.conflicts = f.conflicts.saturating_sub(1);
                        f.rv += 1;
                        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "the object has been modified", "reason": "Conflict", "code": 409});
                        (409, status)
                    } else {
                        f.rv += 1;
                        f.lease = sent;
                        (200, f.lease.clone())
                    }
                };
                let resp = http::Response::builder().status(code).header("content-type", "application/json");
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(resp.body(Full::new(Bytes::from(out.to_string())))?)
            }
        });
        let client = kube::Client::new(svc, "ns");
        (Elector::new(client, Config::new("ns", "l", "me")), fake)
    }

    fn holder(fake: &Mutex<Fake>) -> serde_json::Value {
        fake.lock().unwrap().lease["spec"]["holderIdentity"].clone()
    }

    #[tokio::test]
    async fn release_reads_again_when_a_renewal_landed_after_its_read() {
        let (mut e, fake) = elector("me", 2);
        e.release().await;
        assert_eq!(holder(&fake), serde_json::Value::Null, "the lease is released");
        assert_eq!(fake.lock().unwrap().puts, 3, "two conflicts, then the write");
    }

    #[tokio::test]
    async fn release_gives_up_after_a_few_conflicts() {
        let (mut e, fake) = elector("me", 1000);
        e.release().await;
        assert_eq!(holder(&fake), "me", "still held: standbys wait for expiry");
        assert_eq!(fake.lock().unwrap().puts, 5, "bounded tries");
    }

    #[tokio::test]
    async fn release_never_writes_a_lease_another_replica_holds() {
        let (mut e, fake) = elector("other", 0);
        e.release().await;
        assert_eq!(holder(&fake), "other");
        assert_eq!(fake.lock().unwrap().puts, 0);
    }
}
