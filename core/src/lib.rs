//! # nlc-core
//!
//! The pure core of node-lifecycle-controller: every decision, and the state it is made from,
//! with no API client and no async runtime (this crate depends on neither `kube::Client` nor
//! tokio, so "pure" is a build error away, not a comment). Time enters as `now` arguments.
//!
//! ```text
//! watch events (slim objects)  -> cache: the index, pods by node, the re-list protocol
//!                              -> state: one owner of the index and of both controllers
//!     eviction:  per-pod deadlines on a timer queue, gated on node lifecycle's judgement
//!     lifecycle: heartbeats, grace periods, conditions, taints from rules, zone limiters
//!                              -> actions (plain data) for the executor, outside this crate
//! ```
//!
//! Modules, from the semantics up:
//! - [`taints`]: taint/toleration matching, outcomes, deadlines, well-known keys.
//! - [`rules`]: condition -> taint rules (upstream's table by default).
//! - [`selector`]: label selectors (`--node-selector`).
//! - [`zone`]: zone key, zone state, tainting rate per state.
//! - [`health`]: heartbeat bookkeeping and the conditions of a silent node.
//! - [`index`]: slim Nodes, Pods and Leases; pods by node.
//! - [`labels`]: the beta OS/arch labels that follow the current ones.
//! - [`cache`]: watch events into the index, the re-list protocol.
//! - [`timer_queue`]: the deadline queue (upstream gives `timed_workers.go` its own file too).
//! - [`upstream`]: upstream's names (field manager, reasons, messages), word for word.
//! - [`action`]: what the controllers decided, and what became of it.
//! - [`ctx`]: what both controllers decide in: the index, `now`, the eviction gate.
//! - [`eviction`]: the taint eviction controller's decisions.
//! - [`lifecycle`]: the node lifecycle controller's decisions.
//! - [`extend`]: the incident lever: eviction deadlines of some nodes moved later for a while.
//! - [`fence`]: fencing a node confirmed off: the signals, the labels, the `out-of-service` taint.
//! - [`operator_labels`]: the labels only an operator may set, and the writes through
//!   `nodes/status` that are ignored.
//! - [`state`]: inputs in, actions out: the whole controller task, testable on a fake clock.
//! - [`default_tolerations`], [`admission`]: the DefaultTolerationSeconds rule and its
//!   admission review.
//! - [`explain`]: what Kubernetes decides for one pod on one node, for `explain`.
//! - [`whatif`]: what the controller would do if a taint or a failure came to some nodes: the
//!   state run forward in shadow mode, for `whatif`.
//! - [`leader`]: leader election decisions, with client-go's semantics.
//! - [`flags`]: durations and the ranges flags must fall in.
//! - [`text`]: text others wrote (annotations), escaped for printing.
//! - [`time`]: saturating time arithmetic, backoff, and times read as Go reads them.
//! - [`skew`]: how far this process's clock is from the API server's.
//! - [`uid`]: an object's UID as the cache holds it (16 bytes when it is a UUID).
//! - [`wire`]: what the watches decode, leniently: one odd object is skipped, never a page.
//! - [`x509`]: a serving certificate's expiry, for the webhook's metric.
//! - [`error`]: the core's error (a value that cannot be used, a manifest that cannot be read).
//! - [`second_writers`]: kube-controller-manager's own controllers left running beside this one.
//! - `fixtures` (this crate's tests only): builders for nodes and pods, and a fake API server for
//!   the state.

#![warn(clippy::disallowed_methods)]

pub mod action;
pub mod admission;
pub mod brakes;
pub mod cache;
pub mod condition;
pub mod ctx;
pub mod default_tolerations;
pub mod error;
pub mod eviction;
pub mod explain;
pub mod extend;
pub mod fence;
#[cfg(test)]
pub mod fixtures;
pub mod flags;
pub mod health;
pub mod index;
pub mod labels;
pub mod leader;
pub mod lifecycle;
pub mod operator_labels;
pub mod policy;
pub mod rules;
pub mod second_writers;
pub mod selector;
pub mod skew;
pub mod state;
pub mod status;
pub mod taints;
pub mod text;
pub mod time;
pub mod timer_queue;
pub mod uid;
pub mod upstream;
pub mod whatif;
pub mod wire;
pub mod x509;
pub mod zone;

pub use error::{Error, Result};
