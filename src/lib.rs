//! # node-lifecycle-controller
//!
//! Taint-based node lifecycle management for Kubernetes, in the shape of the best controllers:
//! decide in pure code, act at the edge.
//!
//! ```text
//! watch streams (Nodes, Leases, Pods)            controller::watch
//!       -> cache (slim objects, pods by node)     index, controller::cache
//!       -> pure decisions, `now` as an argument:  taints (matching, outcome), zone (zone key),
//!                                                 default_tolerations (admission rule)
//!       -> effects (plain data)
//!       -> executor: the only code that writes to the API (leader-gated, rate-limited, retried)
//! ```
//!
//! Modules:
//! - [`taints`]: PURE taint/toleration matching, eviction outcome and deadlines, well-known keys.
//! - [`default_tolerations`]: PURE DefaultTolerationSeconds rule.
//! - [`explain`]: the `explain` command (pure decision + text/JSON rendering).
//! - [`zone`]: PURE zone key, zone state, tainting rate per state.
//! - [`health`]: PURE heartbeat bookkeeping, grace periods, the conditions of a silent node.
//! - [`rules`]: PURE condition -> taint rules (upstream's table by default, configurable).
//! - [`lifecycle`]: PURE node lifecycle decisions: conditions, taints, zone limiters.
//! - [`index`]: PURE slim cluster cache, pods indexed by node.
//! - [`eviction`]: PURE taint eviction decisions and the timer queue.
//! - [`effect`]: effects, the plain-data boundary between decisions and the executor.
//! - [`controller`]: I/O: watches, the controller task (its pure `state`), the executor.
//! - [`clock`]: the one clock (monotonic wall time; paused in tests).
//! - [`webhook`]: DefaultTolerationSeconds as a mutating admission webhook (pure `mutate`, TLS transport).
//! - [`config`], [`client`], [`telemetry`], [`metrics`], [`admin`], [`error`]: plumbing.

pub mod admin;
pub mod client;
pub mod clock;
pub mod config;
pub mod controller;
pub mod default_tolerations;
pub mod effect;
pub mod error;
pub mod eviction;
pub mod explain;
pub mod health;
pub mod index;
pub mod lifecycle;
pub mod metrics;
pub mod rules;
pub mod selector;
pub mod taints;
pub mod telemetry;
pub mod webhook;
pub mod zone;

pub use error::{Error, Result};
