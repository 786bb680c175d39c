//! The admission webhook server: DefaultTolerationSeconds, PodTolerationRestriction,
//! ExtendedResourceToleration and toleration rules, decided by [`nlc_core::admission`], served
//! over TLS with certificates reloaded from disk.

pub(crate) mod args;
pub(crate) mod cache;
pub(crate) mod deciders;
pub(crate) mod metrics;
pub(crate) mod server;

pub(crate) use args::{WebhookArgs, WebhookCommand};

use crate::error::Result;
use crate::runtime::Runtime;
use metrics::WebhookMetrics;

/// Adds the webhook to a runtime: its metrics, its readiness (the namespace cache and, when they
/// are on, the toleration rules have synced) and its tasks. Binds its listener now, so that a
/// bad address or certificate fails the start.
/// `status_writes`: whether its rules' statuses may be written (the controller's write permission
/// when it runs inside the controller, always when on its own).
pub(crate) async fn spawn(
    rt: &mut Runtime,
    cfg: server::Config,
    status_writes: crate::runtime::own_status::StatusWrites,
) -> Result<()> {
    let metrics = WebhookMetrics::register(rt.registry());
    let mut ready = vec![rt.readiness_check("webhook namespace cache")];
    if cfg.plugins.toleration_rules {
        ready.push(rt.readiness_check("toleration rules"));
    }
    let handles = server::Handles {
        client: rt.client(),
        metrics,
        http: rt.http_metrics(),
        watch: rt.watch_metrics(),
        stop: rt.shutdown(),
        ready,
        status_writes,
    };
    for (name, task) in server::start(cfg, handles).await? {
        if name == "webhook" {
            rt.spawn(name, task);
        } else {
            rt.spawn_until_shutdown(name, task);
        }
    }
    Ok(())
}

/// `node-lifecycle-controller webhook`: the webhook alone, with its admin endpoint.
pub async fn run(cmd: WebhookCommand, configz: crate::runtime::configz::Configz) -> Result<()> {
    let WebhookCommand { client, admin, webhook } = cmd;
    let cfg = webhook.into_config()?;
    let mut rt = Runtime::build(&client, &admin, &configz).await?;
    spawn(&mut rt, cfg, crate::runtime::own_status::StatusWrites::always()).await?;
    rt.run().await
}
