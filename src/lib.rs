//! # node-lifecycle-controller
//!
//! Taint-based node lifecycle management for Kubernetes, in the shape of the best controllers:
//! decide in pure code, act at the edge. Two crates make the split a build error away:
//! [`nlc_core`] holds every decision and has no API client and no async runtime; this crate
//! holds the I/O around it.
//!
//! ```text
//! watch streams (Nodes, bound Pods, node Leases)    controller::watch     -> slim objects
//!   -> one controller task owns the state           nlc_core::state       (pure, `now` is an argument)
//!        cache: index, pods by node                 nlc_core::cache, index
//!        node lifecycle: health, zones, taints      nlc_core::lifecycle   -> gate for eviction
//!        taint eviction: deadlines, timer queue     nlc_core::eviction
//!   -> actions (plain data)                         nlc_core::action
//!   -> executor: the only code that writes what     controller::executor  (while leading, paced,
//!      the controllers decide, reports results back                        one request path)
//! ```
//!
//! Five writers stand outside the executor by design, each writing only its own object: leader
//! election its Lease ([`runtime::leader`]), the webhook the status of TolerationRules
//! ([`webhook::cache`]), the [`uninstall`] command the taints of our own rules, the `fence` /
//! `unfence` commands ([`fencing`]) a person's fence request on a node, and the [`extend`]
//! command a person's incident lever on nodes.
//!
//! Modules:
//! - [`runtime`]: the one runtime of every long-running command: client, metrics registry, admin
//!   endpoint (health, liveness, readiness, metrics), shutdown, tasks in tracing spans.
//! - [`controller`]: `run`: the watches, the controller task, the executor.
//! - [`lifecycle`], [`eviction`]: the controllers' flags (their decisions live in the core).
//! - [`webhook`]: the admission webhook server (decisions: [`nlc_core::admission`]).
//! - [`explain`]: the `explain` command's reading of files and the cluster.
//! - [`fencing`]: the `fence` and `unfence` commands (`kubectl nlc fence NODE`): an operator's
//!   request that a node confirmed off be fenced.
//! - [`extend`]: the `extend` command (`kubectl nlc extend`): the incident lever, eviction
//!   deadlines of some nodes moved later for a while.
//! - [`uninstall`]: the `uninstall` command: the taints only our own rules manage, removed before
//!   a rollback.
//! - [`status`]: the `status` command (`kubectl nlc status`): the controller's pure code over the
//!   cluster as listed.
//! - [`clock`]: the one clock (wall time that follows the system, monotonic sleeps, step
//!   detection; a fake one for tests).
//! - [`config`]: the top-level command; [`output`]: `-o` of the reports; [`metrics`]: their
//!   rendering (each component's metric families live beside it); [`error`]: the error.

#![warn(clippy::disallowed_methods)]
// An application, not a library: `pub` is what the binary, the integration tests and the bench
// use, everything else is `pub(crate)` so that rustc's dead-code lint sees it. Its documentation
// is built with `--document-private-items` (`make lint`), where links to crate-private items
// resolve.
#![allow(rustdoc::private_intra_doc_links)]

pub(crate) mod clock;
pub mod config;
pub mod controller;
pub mod error;
pub(crate) mod eviction;
pub mod explain;
pub mod extend;
pub mod fencing;
pub(crate) mod lifecycle;
pub(crate) mod metrics;
pub(crate) mod output;
pub mod runtime;
pub mod status;
pub mod uninstall;
pub mod webhook;
pub mod whatif;

pub use error::{Error, Result};

/// What every write names as its author: the field manager of every patch and create, and the
/// client's User-Agent, so that managedFields and audit logs tell our writes from another
/// controller's.
pub(crate) const FIELD_MANAGER: &str = concat!("node-lifecycle-controller/", env!("CARGO_PKG_VERSION"));

/// Patch parameters naming us as the field manager.
pub(crate) fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..kube::api::PatchParams::default() }
}

/// Create and replace parameters naming us as the field manager.
pub(crate) fn post_params() -> kube::api::PostParams {
    kube::api::PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..kube::api::PostParams::default() }
}
