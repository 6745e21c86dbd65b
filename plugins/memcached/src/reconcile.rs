use crate::types::{DEFAULT_IMAGE, Memcached as Cr, MemcachedStatus};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, Pod, PodSecurityContext, PodSpec, PodTemplateSpec, SeccompProfile,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use std::collections::BTreeMap;
use wasmop_sdk::helpers::{
    add_finalizer, conditions_equivalent, controller_ref, has_finalizer, is_controlled_by, remove_finalizer,
    set_condition, setting,
};
use wasmop_sdk::{
    Action, ClusterExt, Context, KindRef, ListParams, Manifest, Mapping, ObjectRef, ReconcileError, Reconciler,
    Request, Verb,
};

pub const FINALIZER: &str = "cache.example.com/finalizer";
const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";

/// This build's version. `--features v2` builds the "new version of the code" that
/// `make demo` hot-reloads: the same plugin, permissions and settings, plus one visible
/// behaviour, [`VERSION_LABEL`] on each Deployment.
pub const VERSION: &str =
    if cfg!(feature = "v2") { concat!(env!("CARGO_PKG_VERSION"), "+v2") } else { env!("CARGO_PKG_VERSION") };
/// v2 only: the memcached version a Deployment runs (its image's tag), as a label on
/// the Deployment itself (not its Pod template, so that adding it rolls no Pods).
pub const VERSION_LABEL: &str = "app.kubernetes.io/version";

pub struct Memcached;

#[derive(serde::Deserialize)]
struct PodMeta {
    metadata: ObjectMeta,
}

/// Settings (all optional):
/// - `namespace: a, b`: the namespaces to watch (default: all);
/// - `defaultImage: IMAGE`: the image for Memcacheds that set no `spec.image`, like an
///   operator's environment variable (default: [`DEFAULT_IMAGE`]).
fn namespaces(settings: &str) -> Vec<String> {
    setting(settings, "namespace")
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect())
        .unwrap_or_default()
}

impl Reconciler for Memcached {
    fn manifest(settings: &str) -> Result<Manifest, String> {
        Ok(Manifest::new::<Cr>("memcached", VERSION)
            .namespaces(namespaces(settings))
            .owns::<Deployment>()
            .watches::<Pod>(Mapping::Label(INSTANCE_LABEL.into()))
            .allow::<Cr>(&[Verb::Update, Verb::UpdateStatus])
            .allow::<Deployment>(&[Verb::Create, Verb::Update])
            // Each reconcile takes every step it can (finalizer, Deployment, status), so
            // the status it writes holds nothing new for the next one.
            .skip_own_writes())
    }

    fn reconcile(ctx: &Context<'_>, req: &Request) -> Result<Action, ReconcileError> {
        let Some(mut mc) = req.current_as::<Cr>()? else {
            return Ok(Action::done());
        };
        let me = ObjectRef::new(&req.object.kind_ref(), req.object.namespace.as_deref(), &req.object.name);

        if mc.metadata.deletion_timestamp.is_some() {
            if remove_finalizer(&mut mc.metadata, FINALIZER) {
                ctx.event(&me, "Deleting", "Memcached is being deleted; its Deployment goes with it");
                ctx.update_obj(&mc)?;
            }
            return Ok(Action::done());
        }
        if !has_finalizer(&mc.metadata, FINALIZER) {
            add_finalizer(&mut mc.metadata, FINALIZER);
            mc = ctx.update_obj(&mc)?;
        }

        let ns = mc.metadata.namespace.clone();
        let default_image = setting(&req.settings, "defaultImage").unwrap_or(DEFAULT_IMAGE);
        let desired =
            deployment_for(&mc, default_image).ok_or_else(|| ReconcileError::permanent("Memcached has no uid yet"))?;
        let size = mc.spec.size;
        let deployment = match ctx.get_opt::<Deployment>(ns.as_deref(), &req.object.name)? {
            None => {
                let d = ctx.create_obj(&desired)?;
                ctx.event(&me, "Created", &format!("Created Deployment {} with {size} replicas", req.object.name));
                d
            }
            Some(mut d) => {
                let uid = mc.metadata.uid.clone().unwrap_or_default();
                if !is_controlled_by(&d.metadata, &uid) {
                    let msg = format!("Deployment {} exists and is not owned by this Memcached", req.object.name);
                    ctx.warning(&me, "NameTaken", &msg);
                    return Err(ReconcileError::permanent(msg));
                }
                let before = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                if converge(&mut d, &desired) {
                    d = ctx.update_obj(&d)?;
                    if before != size {
                        ctx.event(
                            &me,
                            "Scaled",
                            &format!("Scaled Deployment {} from {before} to {size} replicas", req.object.name),
                        );
                    }
                }
                d
            }
        };

        // Only Pod metadata is read: deserializing whole Pods would double the plugin's size.
        let pods: Vec<PodMeta> = ctx.list_as(
            &KindRef::of::<Pod>(),
            &ListParams {
                namespace: ns.clone(),
                label_selector: Some(format!("{INSTANCE_LABEL}={}", req.object.name)),
                field_selector: None,
            },
        )?;
        let mut nodes: Vec<String> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        nodes.sort();

        let ready = deployment.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
        let updated = deployment.status.as_ref().and_then(|s| s.updated_replicas).unwrap_or(0);
        let failure = deployment
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "ReplicaFailure" && c.status == "True"))
            .map(|c| c.message.clone().unwrap_or_default());
        let generation = mc.metadata.generation;
        let old = mc.status.clone().unwrap_or_default();
        let mut status = MemcachedStatus {
            nodes,
            ready_replicas: ready,
            conditions: old.conditions.clone(),
            observed_generation: generation,
        };
        let settled = ready == size && updated == size && status.nodes.len() as i32 == size;
        let available = if size == 0 { true } else { ready >= 1 && ready == size };
        set_condition(
            &mut status.conditions,
            "Available",
            available,
            if available { "Ready" } else { "Scaling" },
            &format!("{ready}/{size} Pods ready"),
            generation,
        );
        set_condition(
            &mut status.conditions,
            "Progressing",
            !settled,
            if settled { "Settled" } else { "Reconciling" },
            &format!("{} Pods, {updated} up to date, {ready} ready, want {size}", status.nodes.len()),
            generation,
        );
        set_condition(
            &mut status.conditions,
            "Degraded",
            failure.is_some(),
            if failure.is_some() { "ReplicaFailure" } else { "AsExpected" },
            failure.as_deref().unwrap_or("no failures"),
            generation,
        );
        let changed = status.nodes != old.nodes
            || status.ready_replicas != old.ready_replicas
            || status.observed_generation != old.observed_generation
            || !conditions_equivalent(&status.conditions, &old.conditions);
        if changed {
            mc.status = Some(status);
            ctx.update_status_obj(&mc)?;
        }
        // No polling while Pods come up: every change that could move the status (a
        // Pod created, ready or gone; the Deployment's own status) is an event on the
        // owned Deployment or a watched Pod, and brings the next reconcile. A 5 s poll
        // here made 1,000 Memcacheds waiting for Pods cost the apiserver ~400 reads/s.
        Ok(Action::done())
    }
}

fn labels(name: &str) -> BTreeMap<String, String> {
    [("app.kubernetes.io/name", "memcached"), (INSTANCE_LABEL, name), ("app.kubernetes.io/managed-by", "wasmop")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The Deployment a Memcached should have; None until the CR has a uid.
pub fn deployment_for(mc: &Cr, default_image: &str) -> Option<Deployment> {
    let name = mc.metadata.name.clone()?;
    let owner = controller_ref(mc)?;
    let labels = labels(&name);
    let selector: BTreeMap<String, String> = labels
        .iter()
        .filter(|(k, _)| k.as_str() != "app.kubernetes.io/managed-by")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let image = mc.spec.image.clone().unwrap_or_else(|| default_image.into());
    let mut deployment_labels = labels.clone();
    if cfg!(feature = "v2")
        && let Some(version) = image_tag(&image)
    {
        deployment_labels.insert(VERSION_LABEL.into(), version.into());
    }
    Some(Deployment {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: mc.metadata.namespace.clone(),
            labels: Some(deployment_labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(mc.spec.size),
            selector: LabelSelector { match_labels: Some(selector), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..Default::default() }),
                spec: Some(PodSpec {
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(1001),
                        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
                        ..Default::default()
                    }),
                    containers: vec![Container {
                        name: "memcached".into(),
                        image: Some(image),
                        image_pull_policy: Some("IfNotPresent".into()),
                        args: Some(vec!["-m=64".into(), "-o".into(), "modern".into(), "-v".into()]),
                        ports: Some(vec![ContainerPort {
                            container_port: mc.spec.container_port,
                            name: Some("memcached".into()),
                            protocol: Some("TCP".into()),
                            ..Default::default()
                        }]),
                        security_context: Some(SecurityContext {
                            run_as_non_root: Some(true),
                            allow_privilege_escalation: Some(false),
                            read_only_root_filesystem: Some(true),
                            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Brings the fields this operator owns (replicas, image, port, args) to `desired`;
/// true when anything changed. Fields others set (annotations, defaults) are kept.
fn converge(d: &mut Deployment, desired: &Deployment) -> bool {
    let mut changed = false;
    if cfg!(feature = "v2") {
        let want = desired.metadata.labels.as_ref().and_then(|l| l.get(VERSION_LABEL));
        let labels = d.metadata.labels.get_or_insert_with(Default::default);
        if labels.get(VERSION_LABEL) != want {
            match want {
                Some(v) => labels.insert(VERSION_LABEL.into(), v.clone()),
                None => labels.remove(VERSION_LABEL),
            };
            changed = true;
        }
    }
    let (Some(spec), Some(want)) = (d.spec.as_mut(), desired.spec.as_ref()) else { return changed };
    if spec.replicas != want.replicas {
        spec.replicas = want.replicas;
        changed = true;
    }
    let want_c = &want.template.spec.as_ref().expect("built with a pod spec").containers[0];
    let pod = spec.template.spec.get_or_insert_with(Default::default);
    match pod.containers.iter_mut().find(|c| c.name == want_c.name) {
        Some(c) => {
            if c.image != want_c.image {
                c.image = want_c.image.clone();
                changed = true;
            }
            if c.args != want_c.args {
                c.args = want_c.args.clone();
                changed = true;
            }
            let port = |c: &Container| c.ports.as_ref().and_then(|p| p.first()).map(|p| p.container_port);
            if port(c) != port(want_c) {
                c.ports = want_c.ports.clone();
                changed = true;
            }
        }
        None => {
            pod.containers = vec![want_c.clone()];
            changed = true;
        }
    }
    changed
}

/// The tag of `image` when it is a valid label value (`docker.io/library/memcached:1.6.38`
/// → `1.6.38`); None for an untagged or digest-only image.
fn image_tag(image: &str) -> Option<&str> {
    let last = image.rsplit('/').next()?;
    let (_, tag) = last.split('@').next()?.split_once(':')?;
    let valid = tag.len() <= 63
        && tag.starts_with(|c: char| c.is_ascii_alphanumeric())
        && tag.ends_with(|c: char| c.is_ascii_alphanumeric())
        && tag.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    valid.then_some(tag)
}
