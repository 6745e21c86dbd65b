//! The webhook flags of `wasmop run`, and `wasmop webhook-config`.

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use wasmop::gateway::Backend;
use wasmop::registry::Registry;
use wasmop::webhook::config::{Endpoint, Options, configurations};
use wasmop::webhook::{Reviewer, Tls, TlsSource, ca_bundle};

#[derive(clap::Args)]
pub struct WebhookArgs {
    /// Serve the plugins' admission webhooks over HTTPS.
    #[arg(long, env = "WASMOP_WEBHOOKS")]
    webhooks: bool,
    /// Address of the webhook server (port 0: any free port).
    #[arg(long, env = "WASMOP_WEBHOOK_BIND_ADDRESS", default_value = "0.0.0.0:9443")]
    webhook_bind_address: SocketAddr,
    /// Serving certificate (PEM), e.g. from cert-manager; re-read when it changes. Without it the host makes its own.
    #[arg(long, env = "WASMOP_WEBHOOK_CERT_FILE", requires = "webhook_key_file")]
    webhook_cert_file: Option<PathBuf>,
    /// Private key (PEM) of --webhook-cert-file.
    #[arg(long, env = "WASMOP_WEBHOOK_KEY_FILE", requires = "webhook_cert_file")]
    webhook_key_file: Option<PathBuf>,
    /// DNS names and IPs of a host-managed certificate (e.g. the webhook Service's DNS name).
    #[arg(long, env = "WASMOP_WEBHOOK_CERT_NAMES", value_delimiter = ',', default_value = "localhost,127.0.0.1")]
    webhook_cert_names: Vec<String>,
    /// NAMESPACE/NAME of a Secret that keeps the host-managed CA and certificate, shared by all replicas.
    #[arg(long, env = "WASMOP_WEBHOOK_CERT_SECRET")]
    webhook_cert_secret: Option<String>,
    /// Webhook configurations (by name) whose caBundle the host keeps set to its CA.
    #[arg(long, env = "WASMOP_WEBHOOK_CONFIGURATIONS", value_delimiter = ',')]
    webhook_configurations: Vec<String>,
    /// Webhook connections served at once; more are closed on accept.
    #[arg(long, env = "WASMOP_WEBHOOK_MAX_CONNECTIONS", default_value_t = 512)]
    webhook_max_connections: usize,
    /// Only clients presenting a certificate signed by this CA (PEM) may connect: the apiserver,
    /// given a client certificate through its AdmissionConfiguration (see OPERATIONS.md).
    #[arg(long, env = "WASMOP_WEBHOOK_CLIENT_CA")]
    webhook_client_ca: Option<PathBuf>,
    /// Deadline of one admission review, in seconds (below the configurations' timeoutSeconds).
    #[arg(long, env = "WASMOP_ADMISSION_DEADLINE_SECONDS", default_value_t = 8)]
    admission_deadline_seconds: u64,
}

fn split(s: &str) -> anyhow::Result<(String, String)> {
    s.split_once('/').map(|(a, b)| (a.to_owned(), b.to_owned())).with_context(|| format!("{s:?} is not NAMESPACE/NAME"))
}

/// Starts the webhook server when `--webhooks` is set; it stops accepting when `stop`
/// resolves. Returns the task to await for in-flight reviews.
pub async fn start(
    args: &WebhookArgs,
    client: kube::Client,
    registry: Arc<Registry>,
    backend: Arc<dyn Backend>,
    caches: Arc<wasmop::gateway::Caches>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Option<tokio::task::JoinHandle<()>>> {
    if !args.webhooks {
        return Ok(None);
    }
    let source = match (&args.webhook_cert_file, &args.webhook_key_file) {
        (Some(cert), Some(key)) => TlsSource::Files { cert: cert.clone(), key: key.clone() },
        _ => TlsSource::Managed {
            names: args.webhook_cert_names.clone(),
            secret: args.webhook_cert_secret.as_deref().map(split).transpose()?,
        },
    };
    let mut tls = Tls::load(&source, Some(client.clone())).await?;
    if let Some(ca) = &args.webhook_client_ca {
        tls.require_client_certs(ca)?;
        tracing::info!(ca = %ca.display(), "webhook clients must present a certificate signed by the client CA");
    }
    let reviewer = Arc::new(Reviewer {
        registry,
        backend,
        deadline: Duration::from_secs(args.admission_deadline_seconds),
        caches,
    });
    let limits = wasmop::webhook::ServerLimits { max_connections: args.webhook_max_connections, ..Default::default() };
    let (addr, task) = wasmop::webhook::serve(args.webhook_bind_address, &tls, reviewer, limits, stop).await?;
    tracing::info!(%addr, "serving admission webhooks");
    match (&tls.ca_pem, args.webhook_configurations.is_empty()) {
        (Some(ca), false) => {
            tokio::spawn(ca_bundle::inject(client, args.webhook_configurations.clone(), ca.clone()));
        }
        (None, false) => tracing::info!("certificate from files: caBundle is left to whoever issued it"),
        _ => {}
    }
    Ok(Some(task))
}

#[derive(clap::Args)]
pub struct WebhookConfigArgs {
    /// Plugins as PATH[=SETTINGS_FILE]; the plugin's name is the file name without .wasm[.gz] (or .js).
    #[arg(required = true)]
    plugins: Vec<String>,
    /// Name of the configurations (give the same to `run --webhook-configurations`).
    #[arg(long, default_value = "wasmop")]
    name: String,
    /// Reach the host at this base URL (a host outside the cluster), e.g. https://127.0.0.1:9443.
    #[arg(long, conflicts_with = "service")]
    url: Option<String>,
    /// Reach the host through this Service: NAMESPACE/NAME[:PORT] (port default 443).
    #[arg(long)]
    service: Option<String>,
    /// A CA (PEM) to write as caBundle; without it the host (or cert-manager) fills it in.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Namespaces never sent to the webhooks. Why the host's own: a Pod webhook with
    /// `failurePolicy: Fail` must not keep the host's own Pods from starting.
    #[arg(long, value_delimiter = ',', default_value = "kube-system,wasmop-system")]
    exclude_namespaces: Vec<String>,
    /// The plugins' `wasmop.io/allowed-namespaces`: only these namespaces are sent.
    #[arg(long, value_delimiter = ',')]
    allowed_namespaces: Vec<String>,
    /// The plugins' `wasmop.io/allowed-kinds` (API_VERSION/KIND): a handler serving
    /// another kind is refused, as the host refuses to load it.
    #[arg(long, value_delimiter = ',')]
    allowed_kinds: Vec<String>,
    /// Fail (reject when the host cannot answer) or Ignore.
    #[arg(long, default_value = "Fail", value_parser = ["Fail", "Ignore"])]
    failure_policy: String,
}

/// Prints the Mutating/ValidatingWebhookConfigurations for the given plugins.
pub async fn webhook_config(args: WebhookConfigArgs) -> anyhow::Result<ExitCode> {
    let endpoint = match (&args.url, &args.service) {
        (Some(u), None) => Endpoint::Url(u.clone()),
        (None, Some(s)) => {
            let (ns, rest) = split(s)?;
            let (name, port) = match rest.split_once(':') {
                Some((n, p)) => (n.to_owned(), p.parse().with_context(|| format!("bad port in {s:?}"))?),
                None => (rest, 443),
            };
            Endpoint::Service { namespace: ns, name, port }
        }
        _ => anyhow::bail!("give --url or --service"),
    };
    let ca_bundle = args
        .ca_file
        .as_ref()
        .map(|p| std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display())))
        .transpose()?;
    let mut plugins = Vec::new();
    for p in &args.plugins {
        let (path, settings) = match p.split_once('=') {
            Some((a, b)) => (PathBuf::from(a), Some(PathBuf::from(b))),
            None => (PathBuf::from(p), None),
        };
        let (rt, compiled, _) = super::load(&path).await?;
        let settings = super::read_settings(settings.as_deref())?;
        let name = super::plugin_name(&path).unwrap_or_else(|| "plugin".to_owned());
        let handlers = rt.handlers(&compiled, &name, &settings, &Default::default()).await?;
        let allowed = |kind: &wasmop_sdk::KindRef| {
            args.allowed_kinds.is_empty()
                || args.allowed_kinds.iter().filter_map(|a| a.rsplit_once('/')).any(|(version, name)| {
                    wasmop_sdk::KindRef::new(version, name).group() == kind.group() && name == kind.kind
                })
        };
        for h in &handlers {
            if let Some(kind) = h.kinds.iter().find(|k| !allowed(k)) {
                anyhow::bail!("{}: handler {} serves {kind}, which is not in --allowed-kinds", path.display(), h.name);
            }
        }
        if handlers.is_empty() {
            eprintln!("note: {} serves no admission handlers", path.display());
        }
        plugins.push((name, handlers));
    }
    let o = Options {
        name: args.name,
        endpoint,
        ca_bundle,
        exclude_namespaces: args.exclude_namespaces,
        only_namespaces: (!args.allowed_namespaces.is_empty()).then_some(args.allowed_namespaces),
        failure_policy: args.failure_policy,
        timeout_seconds: 10,
    };
    for c in configurations(&o, &plugins) {
        print!("---\n{}", serde_yaml::to_string(&c)?);
    }
    Ok(ExitCode::SUCCESS)
}
