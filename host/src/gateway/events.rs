//! Kubernetes Events, written as core/v1 Events so `kubectl describe` shows them.
//!
//! Why not kube's `Recorder`: it folds every Event with the same reason into one series
//! and keeps the first message, so "Scaled from 3 to 1" followed by "Scaled from 1 to 5"
//! would show the stale text. Here, as in client-go, identical Events (same object,
//! type, reason *and* message) within ten minutes bump `count` on one Event; a new
//! message is a new Event.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const AGGREGATE_FOR: Duration = Duration::from_secs(600);
/// Distinct Events remembered for aggregation; older ones are forgotten first.
const MEMORY: usize = 4096;

type Key = (String, String, String, String, String, String);

pub struct EventWriter {
    client: kube::Client,
    instance: String,
    seen: Mutex<HashMap<Key, (String, i32, Instant)>>,
}

impl EventWriter {
    pub fn new(client: kube::Client, instance: &str) -> Self {
        EventWriter { client, instance: instance.to_owned(), seen: Mutex::default() }
    }

    /// Writes one Event about `regarding`; returns the apiserver's error, if any.
    pub async fn write(
        &self,
        component: &str,
        regarding: ObjectReference,
        type_: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let ns = regarding.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let now = k8s_openapi::jiff::Timestamp::now();
        let key: Key = (
            ns.clone(),
            regarding.name.clone().unwrap_or_default(),
            regarding.uid.clone().unwrap_or_default(),
            type_.to_owned(),
            reason.to_owned(),
            message.to_owned(),
        );
        let existing = {
            let mut seen = self.seen.lock().unwrap();
            seen.retain(|_, (_, _, at)| at.elapsed() < AGGREGATE_FOR);
            seen.get_mut(&key).map(|(name, count, at)| {
                *count += 1;
                *at = Instant::now();
                (name.clone(), *count)
            })
        };
        if let Some((name, count)) = existing {
            let patch = serde_json::json!({"count": count, "lastTimestamp": Time(now)});
            if api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.is_ok() {
                return Ok(());
            }
        }
        let ev = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", regarding.name.clone().unwrap_or_else(|| "object".into()))),
                namespace: Some(ns),
                ..Default::default()
            },
            involved_object: regarding,
            type_: Some(type_.to_owned()),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            action: Some("Reconcile".into()),
            reporting_component: Some(component.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            source: Some(EventSource { component: Some(component.to_owned()), host: None }),
            ..Default::default()
        };
        let created = api.create(&PostParams::default(), &ev).await?;
        let mut seen = self.seen.lock().unwrap();
        if seen.len() >= MEMORY
            && let Some(oldest) = seen.iter().min_by_key(|(_, v)| v.2).map(|(k, _)| k.clone())
        {
            seen.remove(&oldest);
        }
        seen.insert(key, (created.metadata.name.unwrap_or_default(), 1, Instant::now()));
        Ok(())
    }
}
