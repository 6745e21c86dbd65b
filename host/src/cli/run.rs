//! `wasmop run`: the host process.

use anyhow::Context;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use wasmop::controllers::Shared;
use wasmop::gateway::{Identities, KubeBackend};
use wasmop::health::Health;
use wasmop::registry::Registry;
use wasmop::runtime::{Limits, Runtime, RuntimeConfig};
use wasmop::sources::{ConfigMapSource, DirSource, PLUGIN_LABEL, PluginSource};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Load plugins from this directory (NAME.wasm[.gz] + optional NAME.settings.yaml); watched for changes.
    #[arg(long, env = "WASMOP_PLUGINS_DIR")]
    plugins_dir: Option<PathBuf>,
    /// Load plugins from ConfigMaps labelled wasmop.io/plugin=true (and reload them when they change).
    #[arg(long, env = "WASMOP_PLUGINS_CONFIGMAPS")]
    plugins_configmaps: bool,
    /// Namespaces whose plugin ConfigMaps are loaded (repeatable; default: $POD_NAMESPACE or "default").
    #[arg(long, env = "WASMOP_PLUGINS_NAMESPACE", value_delimiter = ',')]
    plugins_namespace: Vec<String>,
    /// Keep compiled plugin code in this directory across restarts (only the host may write it).
    #[arg(long, env = "WASMOP_COMPILE_CACHE_DIR")]
    compile_cache_dir: Option<PathBuf>,
    /// Compiler for plugin code: tiered (Winch at once, Cranelift in the background), optimizing (Cranelift only) or baseline (Winch only).
    #[arg(long, env = "WASMOP_PLUGIN_COMPILER", value_enum, default_value_t = wasmop::runtime::Compiler::Tiered)]
    plugin_compiler: wasmop::runtime::Compiler,
    /// Write /tmp/perf-<pid>.map naming each plugin function's code, so `perf record -p` /
    /// `perf report` show plugin functions instead of bare addresses (for profiling plugins).
    #[arg(long, env = "WASMOP_PLUGIN_PERF_MAP")]
    plugin_perf_map: bool,
    /// Concurrent reconciles per plugin.
    #[arg(long, env = "WASMOP_WORKERS", default_value_t = 4)]
    workers: usize,
    /// The shortest requeue-after honoured, in milliseconds: a reconcile asking for less (0 included) is requeued after this.
    #[arg(long, env = "WASMOP_MIN_REQUEUE_MS", default_value_t = 1000)]
    min_requeue_ms: u64,
    /// The largest share of wall time one object's reconciles that change nothing else may take
    /// while events about it keep coming, in percent: after such a reconcile took t, the object's
    /// next one starts no sooner than t × (100 − share) / share later (at most 5 s), with every
    /// event meanwhile folded into it. 100 turns this off (controller-runtime's behaviour).
    #[arg(long, env = "WASMOP_RECONCILE_SHARE_PERCENT", default_value_t = 25, value_parser = clap::value_parser!(u8).range(1..=100))]
    reconcile_share_percent: u8,
    /// The nice value (0-19) of the threads plugin calls move to once they compute for long or
    /// their plugin's calls are heavy or keep failing: the kernel then serves webhooks and short
    /// reconciles first and gives such calls the share this value leaves them. 0 turns this off
    /// (long calls still take turns while short ones are busy). `idle`: idle priority
    /// (`SCHED_IDLE`), only the CPU webhooks and short reconciles leave.
    #[arg(long, env = "WASMOP_LONG_CALL_NICE", default_value_t = wasmop::runtime::ASIDE_PRIORITY)]
    long_call_nice: wasmop::runtime::Priority,
    /// The nice value (0-19) of the threads controllers run on (their watches, queues and
    /// reconciles): the kernel serves webhooks first and gives reconciles the share this value
    /// leaves them while reviews keep the host busy. 0: the webhooks' own rank. `idle`: idle
    /// priority, only the CPU webhooks leave.
    #[arg(long, env = "WASMOP_RECONCILE_NICE", default_value_t = wasmop::controllers::RECONCILE_PRIORITY)]
    reconcile_nice: wasmop::runtime::Priority,
    /// Wasm instances alive at once, host-wide.
    #[arg(long, env = "WASMOP_MAX_INSTANCES", default_value_t = 64)]
    max_instances: u32,
    /// Wall-clock deadline of one reconcile, in seconds.
    #[arg(long, env = "WASMOP_RECONCILE_DEADLINE_SECONDS", default_value_t = 30)]
    reconcile_deadline_seconds: u64,
    /// Linear memory of one plugin instance, in MiB.
    #[arg(long, env = "WASMOP_PLUGIN_MEMORY_MIB", default_value_t = 128)]
    plugin_memory_mib: usize,
    /// What all plugin instances' linear memories may add up to, host-wide, in MiB (reconciles,
    /// reviews and warm instances alike; keep it well below the container's memory limit).
    #[arg(long, env = "WASMOP_PLUGIN_MEMORY_BUDGET_MIB", default_value_t = 640)]
    plugin_memory_budget_mib: usize,
    /// The share of --plugin-memory-budget-mib one plugin's instances may hold together, in percent.
    #[arg(long, env = "WASMOP_PLUGIN_MEMORY_SHARE_PERCENT", default_value_t = 25, value_parser = clap::value_parser!(u8).range(1..=100))]
    plugin_memory_share_percent: u8,
    /// The most --compile-cache-dir may hold, in MiB; the least recently used code is evicted first.
    #[arg(long, env = "WASMOP_COMPILE_CACHE_MAX_MIB", default_value_t = 192)]
    compile_cache_max_mib: u64,
    /// The most memory kept for reuse by plugins' next compiles, in MiB: the optimized code of
    /// each function of a plugin's last compile, so that a reload recompiles only what changed
    /// (0: recompile everything).
    #[arg(long, env = "WASMOP_COMPILE_REUSE_MAX_MIB", default_value_t = 48)]
    compile_reuse_max_mib: usize,
    /// The most memory a plugin's `wasmop.io/memory-mib` annotation may ask for, in MiB.
    #[arg(long, env = "WASMOP_PLUGIN_MEMORY_CEILING_MIB", default_value_t = 512)]
    plugin_memory_ceiling_mib: usize,
    /// The longest deadline a plugin's `wasmop.io/deadline-seconds` annotation may ask for.
    #[arg(long, env = "WASMOP_RECONCILE_DEADLINE_CEILING_SECONDS", default_value_t = 300)]
    reconcile_deadline_ceiling_seconds: u64,
    /// Instances of one plugin alive at once (its annotation `wasmop.io/max-instances` may lower or raise it up to half of --max-instances).
    #[arg(long, env = "WASMOP_PLUGIN_MAX_INSTANCES", default_value_t = 16)]
    plugin_max_instances: u32,
    /// Meter wasm fuel: each call may burn this much (0: no metering; the deadline still bounds every call).
    #[arg(long, env = "WASMOP_PLUGIN_FUEL", default_value_t = 0)]
    plugin_fuel: u64,
    /// Address of the /metrics, /healthz, /readyz and /plugins endpoints (port 0: any free port).
    #[arg(long, env = "WASMOP_METRICS_BIND_ADDRESS", default_value = "0.0.0.0:8080")]
    metrics_bind_address: std::net::SocketAddr,
    /// Log format.
    #[arg(long, env = "WASMOP_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    log_format: LogFormat,
    /// Grace period for in-flight reconciles on SIGTERM/SIGINT, in seconds.
    #[arg(long, env = "WASMOP_SHUTDOWN_GRACE_SECONDS", default_value_t = 25)]
    shutdown_grace_seconds: u64,
    /// Whom the host acts as for a plugin: its own ServiceAccount (named after the plugin,
    /// in its ConfigMap's namespace; see `wasmop rbac`), or the host itself (development only).
    #[arg(long, env = "WASMOP_PLUGIN_IDENTITY", value_enum, default_value_t = PluginIdentity::ServiceAccount)]
    plugin_identity: PluginIdentity,
    /// Namespace of the ServiceAccounts of --plugins-dir plugins (default: $POD_NAMESPACE or "default").
    #[arg(long, env = "WASMOP_PLUGINS_DIR_SERVICE_ACCOUNT_NAMESPACE")]
    plugins_dir_service_account_namespace: Option<String>,
    #[command(flatten)]
    webhooks: super::webhooks::WebhookArgs,
    #[command(flatten)]
    election: super::election::ElectionArgs,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum PluginIdentity {
    ServiceAccount,
    Host,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("WASMOP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn,wasmtime=warn,cranelift=warn"));
    use std::io::IsTerminal;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => b.init(),
        LogFormat::Json => b.json().init(),
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    init_logs(args.log_format);
    let mut config =
        kube::Config::infer().await.context("no cluster configuration (KUBECONFIG or in-cluster config)")?;
    // Named in the apiserver's audit log, so its requests can be told from anyone else's.
    config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static(concat!("wasmop/", env!("CARGO_PKG_VERSION"))),
    ));
    let instance = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("wasmop-{}", std::process::id()));
    let kube = Arc::new(KubeBackend::new(config.clone(), &instance).context("cannot build the cluster client")?);
    let own_namespace = std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".into());
    let identities = match args.plugin_identity {
        PluginIdentity::ServiceAccount => Identities::ServiceAccounts(kube.clone()),
        PluginIdentity::Host => {
            tracing::warn!(
                "--plugin-identity host: every plugin acts as the host's own ServiceAccount, so the host's RBAC is \
                 what each plugin may do; use it on a development cluster only"
            );
            Identities::Host
        }
    };
    let runtime = Arc::new(Runtime::new(RuntimeConfig {
        cache_dir: args.compile_cache_dir.clone(),
        max_instances: args.max_instances,
        memory_ceiling: (args.plugin_memory_ceiling_mib.max(args.plugin_memory_mib)) << 20,
        memory_budget: args.plugin_memory_budget_mib.saturating_mul(1 << 20),
        memory_share: args.plugin_memory_budget_mib.saturating_mul(1 << 20) / 100
            * args.plugin_memory_share_percent as usize,
        cache_max_bytes: args.compile_cache_max_mib.saturating_mul(1 << 20),
        reuse_max_bytes: args.compile_reuse_max_mib.saturating_mul(1 << 20),
        fuel: args.plugin_fuel > 0,
        compiler: args.plugin_compiler,
        perf_map: args.plugin_perf_map,
        aside_priority: args.long_call_nice,
        ..Default::default()
    })?);
    // One plugin may hold at most half the host-wide slots, annotation or not.
    let plugin_slot_ceiling = (args.max_instances / 2).max(1);
    let limits = Limits {
        deadline: Duration::from_secs(args.reconcile_deadline_seconds),
        memory_bytes: args.plugin_memory_mib << 20,
        fuel: (args.plugin_fuel > 0).then_some(args.plugin_fuel),
        max_instances: args.plugin_max_instances.min(plugin_slot_ceiling),
        ..Default::default()
    };
    let ceilings = wasmop::sources::Ceilings {
        deadline: Duration::from_secs(args.reconcile_deadline_ceiling_seconds.max(args.reconcile_deadline_seconds)),
        memory_bytes: args.plugin_memory_ceiling_mib.max(args.plugin_memory_mib) << 20,
        fuel: (args.plugin_fuel > 0).then_some(u64::MAX),
        max_instances: plugin_slot_ceiling,
    };
    let registry = Registry::new(runtime.clone());
    // An idle host gives back what bursts of work left in the heap.
    let _trim = wasmop::trim::periodically(wasmop::trim::INTERVAL);

    let (tx, rx) = mpsc::channel(64);
    let mut sources: Vec<Box<dyn PluginSource>> = Vec::new();
    if let Some(dir) = &args.plugins_dir {
        let accounts = args.plugins_dir_service_account_namespace.as_deref().unwrap_or(&own_namespace);
        sources.push(Box::new(DirSource::new(dir, limits.clone()).identities_in(accounts)));
    }
    if args.plugins_configmaps {
        let namespaces = if args.plugins_namespace.is_empty() {
            vec![own_namespace.clone()]
        } else {
            args.plugins_namespace.clone()
        };
        tracing::info!(?namespaces, label = PLUGIN_LABEL, "loading plugins from ConfigMaps");
        sources.push(Box::new(ConfigMapSource::new(config.clone(), namespaces, limits.clone(), ceilings)));
    }
    if sources.is_empty() {
        tracing::warn!("no plugin source given (--plugins-dir, --plugins-configmaps): the host will idle");
    }
    let health = Arc::new(Health::new(sources.len()));
    let addr = super::serve::serve(args.metrics_bind_address, health.clone(), registry.clone())
        .await
        .with_context(|| format!("cannot listen on {}", args.metrics_bind_address))?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz, /plugins");
    let events: Arc<dyn wasmop::gateway::Backend> = kube.clone();
    tokio::spawn(wasmop::sources::drive(registry.clone(), rx, Some(events), identities, health.clone()));
    // On a niced thread of their own, so that however many plugin ConfigMap events
    // come, their decoding never stands between two reviews (see `sources::apart`).
    wasmop::sources::run_apart(sources, tx).context("cannot start the plugin sources' thread")?;

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stop = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let backend: Arc<dyn wasmop::gateway::Backend> = kube.clone();
    let caches = Arc::new(wasmop::gateway::Caches::default());
    let webhooks = super::webhooks::start(
        &args.webhooks,
        kube.client().clone(),
        registry.clone(),
        backend,
        caches.clone(),
        until_stop(stopped.clone()),
    )
    .await
    .context("cannot start the webhook server")?;

    let client = kube.client().clone();
    let min_requeue = Duration::from_millis(args.min_requeue_ms);
    let reconcile_share = args.reconcile_share_percent;
    // As many reconcile threads as the host's runtime has workers.
    let threads = tokio::runtime::Handle::current().metrics().num_workers();
    let apart = wasmop::controllers::Apart::start(threads, args.reconcile_nice)
        .context("cannot start the reconcile threads")?;
    let reconciles = apart.handle();
    // Reconciles get cluster clients of their own, made on their threads (see
    // `KubeBackend::with_own_clients`): no review waits on a reconcile thread.
    let reconcile_kube = {
        let _on = reconciles.enter();
        Arc::new(kube.with_own_clients().context("cannot build the reconciles' cluster client")?)
    };
    let shared = Arc::new(Shared {
        kube: reconcile_kube,
        runtime,
        workers: args.workers,
        health,
        caches,
        min_requeue,
        reconcile_share,
        reconciles,
    });
    // Controllers stop taking work and drain in-flight reconciles; whatever is still
    // running after the grace period is abandoned (reconciles are idempotent, and the
    // next leader or start converges it).
    let grace = Duration::from_secs(args.shutdown_grace_seconds);
    let controllers = {
        let (stopped, instance) = (stopped.clone(), instance.clone());
        tokio::spawn(async move {
            let r = super::election::run_controllers(
                &args.election,
                client,
                &instance,
                shared,
                registry,
                stopped,
                grace.saturating_sub(Duration::from_secs(1)),
            )
            .await;
            if let Err(e) = r {
                tracing::error!("controllers: {e:#}");
                std::process::exit(2);
            }
        })
    };
    tracing::info!(instance, "wasmop host running");
    shutdown_signal().await;
    let _ = stop.send(true);
    let manager = async move {
        let _ = controllers.await;
        if let Some(w) = webhooks {
            let _ = w.await;
        }
    };
    if tokio::time::timeout(grace, manager).await.is_err() {
        tracing::warn!(?grace, "grace period over with reconciles still running; exiting");
    }
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down: finishing in-flight reconciles and reviews");
}
