//! Keeps the host's CA in its webhook configurations, by name.
//!
//! Flow: one watch per configuration kind, narrowed to the given names by field
//! selector; whenever a configuration appears or changes and any of its webhooks
//! carries a different `caBundle`, the host replaces it (optimistic concurrency: on a
//! conflict the watch delivers the newer version and the loop tries again). A
//! configuration that does not exist yet is simply waited for.

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;

/// Runs until the process ends.
pub async fn inject(client: kube::Client, names: Vec<String>, ca_pem: String) {
    let ca = ByteString(ca_pem.into_bytes());
    let mut tasks = Vec::new();
    for name in names {
        let m: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let v: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        tasks.push(tokio::spawn(keep(m, name.clone(), ca.clone(), |c: &mut MutatingWebhookConfiguration| {
            c.webhooks.iter_mut().flatten().map(|w| &mut w.client_config.ca_bundle).collect()
        })));
        tasks.push(tokio::spawn(keep(v, name, ca.clone(), |c: &mut ValidatingWebhookConfiguration| {
            c.webhooks.iter_mut().flatten().map(|w| &mut w.client_config.ca_bundle).collect()
        })));
    }
    futures::future::join_all(tasks).await;
}

async fn keep<K>(api: Api<K>, name: String, ca: ByteString, bundles: fn(&mut K) -> Vec<&mut Option<ByteString>>)
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
    K: Send + Sync + 'static,
{
    let kind = K::kind(&());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher(api.clone(), cfg));
    while let Some(ev) = stream.next().await {
        let mut obj = match ev {
            Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => o,
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!(%kind, %name, "watching webhook configuration: {e}");
                continue;
            }
        };
        // Re-read and retry on failure: a conflict or a blip must not leave a stale CA.
        for attempt in 0..5 {
            if !set(&mut obj, &ca, bundles) {
                break;
            }
            match api.replace(&name, &PostParams::default(), &obj).await {
                Ok(_) => {
                    tracing::info!(%kind, %name, "webhook CA bundle written");
                    break;
                }
                Err(e) => tracing::warn!(%kind, %name, attempt, "cannot write the webhook CA bundle: {e}"),
            }
            tokio::time::sleep(std::time::Duration::from_millis(500 << attempt)).await;
            match api.get_opt(&name).await {
                Ok(Some(o)) => obj = o,
                _ => break,
            }
        }
    }
}

/// Puts `ca` into every webhook; true when anything changed.
fn set<K>(obj: &mut K, ca: &ByteString, bundles: fn(&mut K) -> Vec<&mut Option<ByteString>>) -> bool {
    let mut changed = false;
    for b in bundles(obj) {
        if b.as_ref() != Some(ca) {
            *b = Some(ca.clone());
            changed = true;
        }
    }
    changed
}
