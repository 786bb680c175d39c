//! The admission webhook server: DefaultTolerationSeconds, PodTolerationRestriction,
//! ExtendedResourceToleration and toleration rules, decided by [`nlc_core::admission`], served
//! over TLS with certificates reloaded from disk.

pub mod args;
pub mod cache;
pub mod server;

pub use args::{WebhookArgs, WebhookCommand};

use crate::error::Result;
use crate::metrics::WebhookMetrics;
use crate::runtime::Runtime;

/// Adds the webhook to a runtime: its metrics, its readiness (the namespace cache and, when they
/// are on, the toleration rules have synced) and its tasks.
pub fn spawn(rt: &mut Runtime, cfg: server::Config) {
    let metrics = WebhookMetrics::register(rt.registry());
    let mut ready = vec![rt.ready_gate("webhook namespace cache")];
    if cfg.plugins.toleration_rules {
        ready.push(rt.ready_gate("toleration rules"));
    }
    let (client, shutdown) = (rt.client(), rt.shutdown());
    rt.spawn("webhook", server::start(client, cfg, metrics, shutdown, ready));
}

/// `node-lifecycle-controller webhook`: the webhook alone, with its admin endpoint.
pub async fn run(cmd: WebhookCommand) -> Result<()> {
    let WebhookCommand { client, admin, webhook } = cmd;
    let cfg = webhook.into_config()?;
    let mut rt = Runtime::build(&client, &admin).await?;
    spawn(&mut rt, cfg);
    rt.run().await
}
