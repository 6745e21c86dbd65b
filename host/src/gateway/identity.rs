//! Who a plugin is to the apiserver: a ServiceAccount the host impersonates on every
//! request it makes for the plugin (gets, lists, watches, writes and Events).
//!
//! Why impersonation: the apiserver's RBAC then decides what each plugin may do, as it
//! does for any controller, and its audit log names the plugin on every request. The
//! host's own checks ([`super::Permissions`]) stay as a fast first filter that fails
//! before a request leaves; the cluster admin's grants are the wall.

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use std::fmt;

/// A plugin's ServiceAccount.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Identity {
    pub namespace: String,
    pub name: String,
}

impl Identity {
    pub fn new(namespace: &str, name: &str) -> Self {
        Identity { namespace: namespace.to_owned(), name: name.to_owned() }
    }

    /// The user name the apiserver gives this ServiceAccount (what `Impersonate-User` carries).
    pub fn user(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServiceAccount {}/{}", self.namespace, self.name)
    }
}

/// Whose identity the host uses for plugins' requests.
#[derive(Clone)]
pub enum Identities {
    /// Each plugin's own ServiceAccount (the default): checked at load by
    /// [`verify`] through this, the host's own backend.
    ServiceAccounts(std::sync::Arc<super::KubeBackend>),
    /// The host's own (`--plugin-identity host`): the host's RBAC is then every
    /// plugin's outer bound. For a development cluster only.
    Host,
}

/// The annotation on a ServiceAccount naming the plugin it was approved for
/// (`wasmop rbac` writes it). Without it a ConfigMap author could point a plugin at
/// any ServiceAccount the host may impersonate: another plugin's, or one with more
/// rights than this plugin was approved for.
pub const APPROVED_PLUGIN: &str = "wasmop.io/plugin";

/// Whether the host can act as `id` for `plugin`: the ServiceAccount exists, was
/// approved for this plugin ([`APPROVED_PLUGIN`]), and the host may impersonate it
/// (asked of the apiserver with a SelfSubjectAccessReview, so no request is made as
/// the plugin before the admin allowed it). Err: what the cluster admin must do, for
/// the `PluginRejected` Event.
pub async fn verify(host: &kube::Client, plugin: &str, id: &Identity) -> Result<(), String> {
    let fix = format!(
        "a cluster admin grants it with `wasmop rbac PLUGIN.wasm --namespace {} --service-account {}` (review, then kubectl apply)",
        id.namespace, id.name
    );
    let accounts: Api<ServiceAccount> = Api::namespaced(host.clone(), &id.namespace);
    let account = match accounts.get_opt(&id.name).await {
        Ok(Some(a)) => a,
        Ok(None) => return Err(format!("the plugin acts as {id}, which does not exist; {fix}")),
        Err(e) => return Err(format!("cannot read {id}, which the plugin acts as: {e}")),
    };
    let approved = account.metadata.annotations.as_ref().and_then(|a| a.get(APPROVED_PLUGIN));
    if approved.map(String::as_str) != Some(plugin) {
        return Err(format!(
            "{id} is not approved for plugin {plugin} (its annotation {APPROVED_PLUGIN} is {}); {fix}",
            approved.map_or("missing".to_owned(), |a| format!("{a:?}"))
        ));
    }
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("impersonate".into()),
                resource: Some("serviceaccounts".into()),
                namespace: Some(id.namespace.clone()),
                name: Some(id.name.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(host.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| format!("cannot ask the apiserver whether the host may act as {id}: {e}"))?;
    match answer.status {
        Some(s) if s.allowed => Ok(()),
        _ => Err(format!("the host may not impersonate {id}, which the plugin acts as; {fix}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_name_is_the_apiservers() {
        let i = Identity::new("wasmop-system", "memcached");
        assert_eq!(i.user(), "system:serviceaccount:wasmop-system:memcached");
        assert_eq!(i.to_string(), "ServiceAccount wasmop-system/memcached");
    }
}
