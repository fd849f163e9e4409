//! Serving a built [`App`]: its listeners bound, the rules' source and the
//! certificates' watcher started, the listeners and upkeep tasks run until shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{App, StartError};
use crate::config::Config;
use crate::state::AppState;
use crate::{api, listen, metrics, reload, tls, xds};

/// The listeners of one service, bound.
#[derive(Debug)]
pub struct Listeners {
    pub http: TcpListener,
    pub grpc: TcpListener,
    pub admin: Option<TcpListener>,
    pub metrics: Option<TcpListener>,
    /// gRPC on a Unix socket as well (`grpc_uds`).
    pub grpc_uds: Option<tokio::net::UnixListener>,
}

/// A started service.
#[derive(Debug)]
pub struct Running {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    /// `None` when the admin listener is off.
    pub admin_addr: Option<SocketAddr>,
    /// The Prometheus listener (`metrics_addr`), when asked for.
    pub metrics_addr: Option<SocketAddr>,
    /// The served certificates, when a listener speaks TLS.
    pub tls: Option<Arc<tls::Certs>>,
    pub state: Arc<AppState>,
    pub shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// Serves until the shutdown token is cancelled and requests in flight have finished.
    pub async fn wait(self) {
        let _ = self.task.await;
    }

    /// Begins a graceful shutdown and waits for it.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.wait().await;
    }
}

impl App {
    /// Binds every listener the configuration names.
    pub async fn bind(&self) -> Result<Listeners, StartError> {
        async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
            TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Listen { addr, source })
        }
        async fn maybe(addr: Option<SocketAddr>) -> Result<Option<TcpListener>, StartError> {
            match addr {
                Some(addr) => bind(addr).await.map(Some),
                None => Ok(None),
            }
        }
        let c = &self.config;
        let grpc_uds = match &c.listen.grpc_uds {
            Some(path) => {
                Some(
                    listen::bind_unix(path).map_err(|source| StartError::ListenUnix {
                        path: path.display().to_string(),
                        source,
                    })?,
                )
            }
            None => None,
        };
        Ok(Listeners {
            http: bind(c.listen.http).await?,
            grpc: bind(c.listen.grpc).await?,
            admin: maybe(c.admin.addr).await?,
            metrics: maybe(c.metrics.addr).await?,
            grpc_uds,
        })
    }

    /// Binds and serves until the returned [`Running`]'s shutdown token is cancelled.
    pub async fn start(self) -> Result<Running, StartError> {
        let listeners = self.bind().await?;
        self.serve(listeners, CancellationToken::new()).await
    }

    /// Serves on `listeners` until `shutdown` is cancelled, then drains.
    pub async fn serve(
        self,
        listeners: Listeners,
        shutdown: CancellationToken,
    ) -> Result<Running, StartError> {
        let App {
            config,
            state,
            certs,
        } = self;
        sources(&config, &state, certs.as_ref(), &shutdown)?;
        crate::stats::statsd::spawn(
            Arc::clone(state.service.stats()),
            &config.stats,
            shutdown.clone(),
        );
        let local = |l: &TcpListener| l.local_addr().expect("a bound listener has an address");
        let (http_addr, grpc_addr) = (local(&listeners.http), local(&listeners.grpc));
        let admin_addr = listeners.admin.as_ref().map(local);
        let metrics_addr = listeners.metrics.as_ref().map(local);

        let (reporter, health) = tonic_health::server::health_reporter();
        // Registered before the port opens (not serving until the first health check), so
        // a health check never finds the names missing.
        api::grpc::set_health(&reporter, false).await;
        let bounds = config.listen.clone();
        let limits = move |name| listen::Limits {
            name,
            header_read: bounds.header_read_timeout,
            idle: bounds.idle_timeout,
            max_connections: bounds.max_connections,
            drain: bounds.drain_timeout,
            // As the reference's GRPC_MAX_CONNECTION_AGE: the gRPC listeners only.
            max_age: (name.starts_with("grpc") && !bounds.max_connection_age.is_zero()).then_some(
                listen::MaxAge {
                    age: bounds.max_connection_age,
                    grace: bounds.max_connection_age_grace,
                },
            ),
        };
        let http_app = api::router::router(Arc::clone(&state));
        let grpc_app = api::grpc::router(
            Arc::clone(&state),
            health,
            config.listen.grpc_request_timeout,
        );
        let admin_app = api::router::admin_router(
            Arc::clone(&state),
            config.admin.token.as_ref().map(|t| Arc::from(t.expose())),
            Arc::from(config.admin.hosts.clone()),
        );
        if let Some(addr) = admin_addr
            && !addr.ip().is_loopback()
            && config.admin.token.is_none()
        {
            tracing::warn!(
                target: "spillway_server",
                %addr,
                "the admin listener is reachable from other hosts and has no token: anyone \
                 who reaches it reads the rules, the configuration and the keys denied most; \
                 set admin_token_file, or keep admin_addr on loopback"
            );
        }
        let metrics_app = api::router::metrics_router(&config.metrics.path);
        let on = config.tls_on();
        let listener_tls = |enabled: bool, strict: bool| {
            certs
                .as_ref()
                .filter(|_| enabled)
                .map(|certs| listen::ListenerTls {
                    certs: Arc::clone(certs),
                    strict,
                })
        };
        let (http_tls, grpc_tls, admin_tls) = (
            listener_tls(on.http, false),
            listener_tls(on.grpc, true),
            listener_tls(on.admin, false),
        );
        let Listeners {
            http,
            grpc,
            admin,
            metrics: prometheus,
            grpc_uds,
        } = listeners;
        if let Some(path) = &config.listen.grpc_uds {
            tracing::info!(target: "spillway_server", path = %path.display(), "gRPC listening on a Unix socket too");
        }
        let task = tokio::spawn({
            let (state, shutdown) = (Arc::clone(&state), shutdown.clone());
            async move {
                let upkeep = tokio::spawn(upkeep(Arc::clone(&state), reporter, shutdown.clone()));
                let sync = tokio::spawn(sync(Arc::clone(&state)));
                tokio::spawn(Arc::clone(&state.limits).follow(shutdown.clone()));
                let admin = async {
                    if let Some(admin) = admin {
                        listen::serve(
                            admin,
                            admin_app,
                            shutdown.clone(),
                            limits("admin"),
                            admin_tls,
                        )
                        .await;
                    }
                };
                let prometheus = async {
                    if let Some(listener) = prometheus {
                        listen::serve(
                            listener,
                            metrics_app,
                            shutdown.clone(),
                            limits("metrics"),
                            None,
                        )
                        .await;
                    }
                };
                let unix_app = grpc_app.clone();
                let unix = async {
                    if let Some(listener) = grpc_uds {
                        listen::serve(
                            listener,
                            unix_app,
                            shutdown.clone(),
                            limits("grpc_uds"),
                            None,
                        )
                        .await;
                    }
                };
                tokio::join!(
                    listen::serve(http, http_app, shutdown.clone(), limits("http"), http_tls),
                    listen::serve(grpc, grpc_app, shutdown.clone(), limits("grpc"), grpc_tls),
                    admin,
                    prometheus,
                    unix,
                );
                upkeep.abort();
                sync.abort();
                tracing::info!(target: "spillway_server", "stopped");
            }
        });
        tracing::info!(
            target: "spillway_server",
            %http_addr,
            %grpc_addr,
            admin_addr = admin_addr.map_or("off".to_owned(), |a| a.to_string()),
            tls = %on,
            "listening"
        );
        if let Some(addr) = metrics_addr {
            tracing::info!(target: "spillway_server", %addr, path = %config.metrics.path, "Prometheus listening");
        }
        Ok(Running {
            http_addr,
            grpc_addr,
            admin_addr,
            metrics_addr,
            tls: certs,
            state,
            shutdown,
            task,
        })
    }
}

/// Where new rules and certificates come from while serving: the xDS client, or
/// watchers on the policy files (and the candidate's), and on the certificate files.
fn sources(
    config: &Config,
    state: &Arc<AppState>,
    certs: Option<&Arc<tls::Certs>>,
    shutdown: &CancellationToken,
) -> Result<(), StartError> {
    if let Some(x) = config.xds() {
        xds::spawn(Arc::clone(state), x.clone(), shutdown.clone());
    }
    if config.rules.watch {
        let live = config
            .xds()
            .is_none()
            .then(|| (config.rules.path.clone(), reload::Set::Live));
        let candidate = config
            .rules
            .candidate
            .clone()
            .map(|p| (p, reload::Set::Candidate));
        for (path, set) in live.into_iter().chain(candidate) {
            reload::watch(Arc::clone(state), path.clone(), set, shutdown.clone()).map_err(
                |source| StartError::Watch {
                    path: path.display().to_string(),
                    source,
                },
            )?;
        }
    }
    if let Some(certs) = certs {
        reload::watch_tls(Arc::clone(certs), shutdown.clone()).map_err(|source| {
            StartError::Watch {
                path: certs
                    .paths()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                source,
            }
        })?;
    }
    Ok(())
}

/// The `sync` limits' counts that are due go to the store, every `MIN_SYNC`.
async fn sync(state: Arc<AppState>) {
    spillway_core::sharing::every_tick(|| {
        let state = Arc::clone(&state);
        async move {
            state.service.flush().await;
            true
        }
    })
    .await;
}

/// Once a second: the store is probed when health follows it, the gRPC health status
/// follows health (as `/healthcheck` does), and the Prometheus recorder's histograms
/// are maintained. On shutdown: not serving, at once.
async fn upkeep(
    state: Arc<AppState>,
    reporter: tonic_health::server::HealthReporter,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut was_healthy = true;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let store_said = if state.health_follows_store {
                    state.probe_store().await
                } else {
                    None
                };
                let health = state.health();
                // Said once when it changes, with the store's own words (probes are told less).
                match health {
                    Err(why) if was_healthy => {
                        let store = store_said.unwrap_or_default();
                        tracing::warn!(target: "spillway_server", why, store, "unhealthy");
                    }
                    Ok(()) if !was_healthy => tracing::info!(target: "spillway_server", "healthy"),
                    _ => {}
                }
                was_healthy = health.is_ok();
                api::grpc::set_health(&reporter, was_healthy).await;
                metrics::handle().run_upkeep();
                state.service.count_holds();
                state.quotas.expire(state.service.now());
                state.history.sample(|| metrics::handle().render(), state.service.now());
                for (name, stores) in state.service.every_store() {
                    metrics::breaker(name, stores.breaker());
                }
            }
            () = shutdown.cancelled() => {
                state.shutting_down.store(true, Ordering::Relaxed);
                // RLQS streams end now (their Envoys keep running their assignments
                // and subscribe again), not at the drain's end.
                state.quotas.stop(state.service.now());
                api::grpc::set_health(&reporter, false).await;
                return;
            }
        }
    }
}
