//! [`start`]: the default server assembled from its [`Args`], bound and ready to serve.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use ironbus_core::auth::DEVELOPMENT_POLICY_NAME;
use ironbus_core::namespaces::OpenNamespace;
use ironbus_core::store::PrefixedStore;
use ironbus_core::{
    Broker, BrokerOptions, NamespaceLimits, Namespaces, Store, SystemClock, Timestamp,
};
use ironbus_metrics::PrometheusExporter;
use ironbus_transport_amqp::limits::ConnectionLimits as AmqpLimits;
use ironbus_transport_amqp::{AmqpOptions, AmqpTransport};
use ironbus_transport_http::limits::ConnectionLimits as HttpLimits;
use ironbus_transport_http::HttpConfig;

use crate::cluster::ClusterNode;
use crate::{config, http, policies, Args, Server, ServerError};

/// The default server, its listeners bound.
#[derive(Debug)]
pub struct Started {
    pub server: Server,
    pub amqp_addr: SocketAddr,
    pub amqps_addr: Option<SocketAddr>,
    pub http_addr: Option<SocketAddr>,
    pub https_addr: Option<SocketAddr>,
    /// The cluster link's address (`--cluster`).
    pub link_addr: Option<SocketAddr>,
    /// The root key as connection strings show it (the operator's is never shown).
    pub shown_key: String,
    /// The CA certificate clients must trust to reach the TLS listeners: the generated
    /// development CA (`<data-dir>/tls/ca.pem`); `None` without TLS listeners or with the
    /// operator's own certificate.
    pub trusted_ca: Option<std::path::PathBuf>,
}

impl Started {
    /// The connection strings the SDKs take: emulator mode on the AMQP port, and TLS (what
    /// they use without `UseDevelopmentEmulator`) when the AMQPS listener is on.
    pub fn connection_strings(&self) -> Vec<String> {
        let (ip, port, key) = (self.amqp_addr.ip(), self.amqp_addr.port(), &self.shown_key);
        let mut strings = vec![format!(
            "Endpoint=sb://{ip}:{port};SharedAccessKeyName={DEVELOPMENT_POLICY_NAME};SharedAccessKey={key};UseDevelopmentEmulator=true"
        )];
        // Over TLS the SDKs verify the certificate's name (localhost) and, without
        // UseDevelopmentEmulator, connect to port 5671.
        if let Some(amqps) = self.amqps_addr {
            let port =
                if amqps.port() == 5671 { String::new() } else { format!(":{}", amqps.port()) };
            strings.push(format!(
                "Endpoint=sb://localhost{port}/;SharedAccessKeyName={DEVELOPMENT_POLICY_NAME};SharedAccessKey={key}"
            ));
        }
        strings
    }
}

/// Opens the stores and the broker, declares the config file's entities and binds every
/// listener `args` asks for, publishing metrics through `metrics` (install it first, once per
/// process: what is recorded before is lost).
pub async fn start(args: Args, metrics: &PrometheusExporter) -> Result<Started, ServerError> {
    let amqps_addr = http::parse_addr("amqps-addr", &args.amqps_addr)?;
    let served = std::iter::once(args.amqp_addr).chain(amqps_addr).chain(args.http.addrs()?);
    let root = policies::root_policy(args.sas_key.as_deref(), served)?;
    let authorizer = Arc::new(policies::authorizer(
        root.policy.clone(),
        &args.policies,
        args.config.as_deref(),
    )?);

    if args.cluster.cluster && args.store.store != crate::stores::StoreKind::Postgres {
        return Err(ServerError::Cluster(
            "--cluster needs --store postgres: every node reaches the same stores".into(),
        ));
    }
    if args.cluster.cluster && args.namespaces_on_demand {
        return Err(ServerError::Cluster(
            "--namespaces-on-demand is not supported with --cluster (one namespace per cluster)"
                .into(),
        ));
    }
    let stores = args.store.open(args.cluster.cluster).await?;
    let namespace_store = stores[0].clone();
    #[cfg(feature = "fault-injection")]
    let (stores, faults) = if args.testing_fault_injection {
        let (stores, faults) = crate::faults::FaultInjection::wrap(stores);
        (stores, Some(faults))
    } else {
        (stores, None)
    };
    let options = BrokerOptions {
        limits: NamespaceLimits {
            max_entities: args.max_entities,
            max_partitioned_entities: args.max_partitioned_entities,
        },
        body_cache_bytes: args.body_cache_mb << 20,
        metrics_entity_labels: args.metrics_entity_labels,
        fence_token: None,
        cluster: args.cluster.cluster,
    };
    let open_namespace = namespace_opener(stores.clone(), options);
    let opening = std::time::Instant::now();
    let broker = Broker::open_with(stores, Arc::new(SystemClock), options)
        .await
        .map_err(ServerError::OpenBroker)?;
    let recovered = broker.recovered().await;
    tracing::info!(
        messages = recovered,
        seconds = opening.elapsed().as_secs_f64(),
        "store opened and partitions recovered"
    );

    // The config's namespace name is what `$namespaceinfo` reports (else "ironbus").
    let mut namespace = None;
    let mut declared_namespaces = HashMap::new();
    if let Some(path) = &args.config {
        let in_config =
            |source| ServerError::Config { path: path.clone(), source: Box::new(source) };
        let text = std::fs::read_to_string(path)
            .map_err(|source| ServerError::ReadConfig { path: path.clone(), source })?;
        namespace = config::namespace_name(&text);
        let mut all = config::parse_all(&text).map_err(in_config)?.into_iter();
        let declared = all.next().map(|(_, declared)| declared).unwrap_or_default();
        for (name, declared) in all {
            let name = name.to_ascii_lowercase();
            if args.cluster.cluster {
                return Err(ServerError::Cluster(format!(
                    "namespace {name}: a cluster serves one namespace (the config's first)"
                )));
            }
            if !ironbus_core::namespaces::valid_name(&name)
                || declared_namespaces.contains_key(&name)
            {
                let why = format!("namespace name {name:?} is not valid or not unique (letters, digits and hyphens, starting with a letter)");
                return Err(in_config(config::ConfigError::invalid(why)));
            }
            let broker = open_namespace(name.clone()).await.map_err(ServerError::OpenBroker)?;
            let created = config::apply(&broker, &declared).await.map_err(in_config)?;
            tracing::info!(namespace = %name, declared = declared.entity_count(), created, "namespace from {}", path.display());
            declared_namespaces.insert(name, broker);
        }
        // Cluster nodes starting together declare the same entities: a write that lost the
        // race to another node's is retriable, and the retry finds the entity made.
        let mut attempts = 0;
        let created = loop {
            match config::apply(&broker, &declared).await {
                Err(e) if args.cluster.cluster && attempts < 10 => {
                    attempts += 1;
                    tracing::debug!(error = %e, "declaring the config's entities; again");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                result => break result.map_err(in_config)?,
            }
        };
        tracing::info!(
            declared = declared.entity_count(),
            created,
            "entities from {}",
            path.display()
        );
    }

    // One certificate for every TLS listener, read (or generated) once.
    let certificate = match (amqps_addr, args.http.https_addr()?) {
        (None, None) => None,
        _ => Some(args.tls.load(&args.store.data_dir)?),
    };
    let amqp_options = AmqpOptions {
        limits: AmqpLimits {
            max_connections: args.max_connections,
            max_connections_per_ip: args.max_connections_per_ip,
        },
        ..AmqpOptions::default()
    };
    let amqp_error = |addr| move |source| ServerError::Bind { listener: "AMQP", addr, source };
    let mut amqp = AmqpTransport::bind_with(args.amqp_addr, authorizer.clone(), amqp_options)
        .await
        .map_err(amqp_error(args.amqp_addr))?;
    if let (Some(addr), Some(certificate)) = (amqps_addr, &certificate) {
        amqp.bind_tls(addr, certificate.server_config(&[])?)
            .await
            .map_err(|source| ServerError::Bind { listener: "AMQP TLS", addr, source })?;
    }
    metrics.watch_amqp(amqp.stats());

    let default_name = namespace.clone().unwrap_or_else(|| "ironbus".to_owned());
    let namespaces = (args.namespaces_on_demand || !declared_namespaces.is_empty()).then(|| {
        let on_demand = args.namespaces_on_demand.then_some(open_namespace);
        Namespaces::new(default_name, broker.clone(), declared_namespaces, on_demand)
    });
    if let Some(namespaces) = &namespaces {
        amqp.serve_namespaces(namespaces.clone());
    }

    let mut config = HttpConfig::new(authorizer);
    config.namespaces = namespaces.clone();
    if let Some(namespace) = namespace {
        config.namespace = namespace;
    }
    config.started_at = broker.clock().now().max(Timestamp::from_millis(0));
    config.tier = args.http.tier();
    config.metrics = Some(metrics.render_fn());
    config.limits = HttpLimits {
        max_connections: args.max_connections,
        max_connections_per_ip: args.max_connections_per_ip,
    };
    config.websocket = Some(http::websocket_hook(amqp.stream_sender()));
    if args.cluster.cluster {
        config.node_id = args.cluster.node_id.clone();
    }
    #[cfg(feature = "fault-injection")]
    if let Some(faults) = faults {
        config.plain_routes = Some(faults.routes(broker.clone()));
    }
    let http = http::bind(&args.http, certificate.as_ref(), config).await?;

    let mut started = Started {
        amqp_addr: amqp.local_addr().map_err(amqp_error(args.amqp_addr))?,
        amqps_addr: amqp.tls_addr(),
        http_addr: http.as_ref().and_then(|http| http.plain_addr()),
        https_addr: http.as_ref().and_then(|http| http.tls_addr()),
        link_addr: None,
        shown_key: root.shown_key().to_owned(),
        trusted_ca: certificate
            .as_ref()
            .and_then(|_| args.tls.development_ca(&args.store.data_dir)),
        server: Server::new(broker).with(amqp),
    };
    if let Some(http) = http {
        started.server = started.server.with(http);
    }
    if let Some(namespaces) = namespaces {
        started.server = started.server.with_namespaces(namespaces);
    }
    if args.cluster.cluster {
        let broker = started.server.broker().clone();
        let node = ClusterNode::bind(&args.cluster, broker, namespace_store).await?;
        started.link_addr = Some(node.link_addr());
        started.server = started.server.with(node);
    }
    tracing::info!(
        amqp = %started.amqp_addr,
        amqps = ?started.amqps_addr,
        http = ?started.http_addr,
        https = ?started.https_addr,
        store = ?args.store.store,
        stores = args.store.stores,
        "ironbus is listening"
    );
    Ok(started)
}

/// Opens a namespace besides the default one: a broker over each store's view under the
/// namespace's key prefix, with the default namespace's options.
fn namespace_opener(stores: Vec<Arc<dyn Store>>, options: BrokerOptions) -> OpenNamespace {
    Arc::new(move |name: String| {
        let prefix = PrefixedStore::namespace_prefix(&name);
        let views: Vec<Arc<dyn Store>> = stores
            .iter()
            .map(|store| {
                Arc::new(PrefixedStore::new(store.clone(), prefix.clone())) as Arc<dyn Store>
            })
            .collect();
        Box::pin(async move { Broker::open_with(views, Arc::new(SystemClock), options).await })
    })
}
